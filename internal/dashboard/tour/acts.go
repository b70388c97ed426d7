package tour

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/chromedp/chromedp"
)

// Page is a logged-in dashboard with a group open, for acts clicked as an
// operator would: a button on an instance's or a host's row, then the
// confirmation dialog's button.
type Page struct {
	ctx     context.Context
	timeout time.Duration
	errs    func() []string
	close   func()
}

// Answer is what the page showed after an act: the job it started with its
// state and text (a refused act: state "ignored" with the reason in the
// text), or the API's error.
type Answer struct {
	Job, State, Text, Error string
}

// Open starts a browser, logs in at o.URL with o.Token and opens o.Group;
// Close ends the browser.
func Open(ctx context.Context, o Options) (*Page, error) {
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	bctx, errs, closeBrowser, err := startBrowser(ctx)
	if err != nil {
		return nil, err
	}
	p := &Page{ctx: bctx, timeout: o.Timeout, errs: errs, close: closeBrowser}
	if err := p.run("log in and open group "+o.Group, append(logIn(o),
		p.poll("the instance table fills", `document.querySelectorAll("#instances tbody tr").length > 0`),
	)...); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

// Close ends the browser.
func (p *Page) Close() { p.close() }

// PageErrors are the page's uncaught script errors so far.
func (p *Page) PageErrors() []string { return p.errs() }

func (p *Page) run(what string, actions ...chromedp.Action) error {
	ctx, cancel := context.WithTimeout(p.ctx, 2*p.timeout)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		return fmt.Errorf("dashboard: %s: %w", what, err)
	}
	return nil
}

func (p *Page) poll(what, expr string) chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		var ok bool
		if err := chromedp.Poll(expr, &ok, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(p.timeout)).Do(ctx); err != nil {
			return fmt.Errorf("wait until %s: %w", what, err)
		}
		return nil
	})
}

// WaitFor waits until the script expr is true on the page.
func (p *Page) WaitFor(what, expr string) error { return p.run(what, p.poll(what, expr)) }

// Eval evaluates the script expr into v.
func (p *Page) Eval(expr string, v any) error {
	return p.run("evaluate "+expr, chromedp.Evaluate(expr, v))
}

// InstanceAct clicks act's button on the instance's row, confirms, and
// waits until the page shows the job ended (or the act refused).
func (p *Page) InstanceAct(instance, act string) (Answer, error) {
	button := `#instances tbody tr[data-instance=` + strconv.Quote(instance) + `] button[data-act=` + strconv.Quote(act) + `]`
	return p.act(button, "#result", `["done", "failed", "ignored"].includes(document.querySelector("#result").dataset.state)`)
}

// HostAct clicks act's button (cordon, uncordon, drain) on the host's row,
// confirms, and waits until the page shows the answer.
func (p *Page) HostAct(host, act string) (Answer, error) {
	button := `#host-table tbody tr[data-host=` + strconv.Quote(host) + `] button[data-act=` + strconv.Quote(act) + `]`
	return p.act(button, "#host-result", fmt.Sprintf(`document.querySelector("#host-result").dataset.act === %s`, strconv.Quote(act)))
}

func (p *Page) act(button, out, ended string) (Answer, error) {
	var a Answer
	q := strconv.Quote
	err := p.run("click "+button+" and confirm",
		clickWhenThere(button),
		chromedp.WaitVisible(`#confirm`, chromedp.ByQuery),
		chromedp.Click(`#confirm-yes`, chromedp.ByQuery),
		chromedp.WaitNotVisible(`#confirm`, chromedp.ByQuery),
		p.poll("the page shows the answer", `(() => { const o = document.querySelector(`+q(out)+`); return o.dataset.error !== undefined || (`+ended+`); })()`),
		chromedp.Evaluate(`(() => { const o = document.querySelector(`+q(out)+`); return { Job: o.dataset.job || "", State: o.dataset.state || "", Text: o.textContent, Error: o.dataset.error || "" }; })()`, &a),
	)
	return a, err
}

// logIn opens the dashboard, logs in with o.Token and clicks o.Group's row
// of the overview.
func logIn(o Options) []chromedp.Action {
	row := `#overview tbody tr[data-group=` + strconv.Quote(o.Group) + `]`
	return []chromedp.Action{
		chromedp.Navigate(o.URL + "/ui/"),
		chromedp.WaitVisible(`#token`, chromedp.ByQuery),
		chromedp.SendKeys(`#token`, o.Token, chromedp.ByQuery),
		chromedp.Submit(`#token`, chromedp.ByQuery),
		// Through the submission's navigation, then clicked in the page.
		chromedp.WaitVisible(row, chromedp.ByQuery),
		clickWhenThere(row),
	}
}

// clickWhenThere clicks the first element sel matches, from the page's own
// script once there is one. The overview and the tables are redrawn each
// second: a node chromedp looked up first could be gone when its click
// came ("Could not find node with given id", on a busy machine).
func clickWhenThere(sel string) chromedp.Action {
	return chromedp.Poll(`(() => { const e = document.querySelector(`+strconv.Quote(sel)+`); if (!e) return false; e.click(); return true; })()`,
		nil, chromedp.WithPollingInterval(100*time.Millisecond))
}
