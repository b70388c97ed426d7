package haproxy

import (
	"fmt"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// wakingPage is what a browser gets while its group wakes: it reloads
// itself each second (the meta refresh; Retry-After says the same to
// clients that read it), and each reload is a request the waker sees in
// the backend's request rate, so the group keeps waking while someone
// waits. It is never cached.
const wakingPage = `<!doctype html>
<html><head><meta charset="utf-8"><meta http-equiv="refresh" content="1">
<title>Starting…</title></head>
<body style="font-family:sans-serif;text-align:center;margin-top:20vh">
<p>Starting up: this page reloads itself in a moment.</p></body></html>
`

// wakingPageLine is the backend line of group g that answers a browser's
// request with wakingPage while g has no usable server (see
// config.ScaleToZero.WakingPage); empty when g holds every request. It
// comes before the hold: a browser is never held, nor counted towards
// max_queue. A request an old worker handed over was let in and held
// there already: it is held on, not answered with the page.
func wakingPageLine(g config.Group) (string, error) {
	if g.ScaleToZero == nil || !g.ScaleToZero.WakingPage {
		return "", nil
	}
	page, err := hapword.Escape(wakingPage)
	if err != nil {
		return "", fmt.Errorf("waking page: %w", err)
	}
	ct, err := hapword.Escape("text/html; charset=utf-8")
	if err != nil {
		return "", fmt.Errorf("waking page: %w", err)
	}
	return fmt.Sprintf("http-request return status 503 content-type %s string %s hdr Retry-After 1 hdr Cache-Control no-store if { nbsrv(%s) eq 0 } { req.hdr(Accept) -m sub text/html } !{ var(%s) -m found }",
		ct, page, g.Name, holdLeftVar), nil
}
