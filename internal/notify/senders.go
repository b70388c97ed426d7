package notify

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/smtp"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"text/template"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
)

// SignatureHeader carries a webhook body's HMAC-SHA256 under the target's
// secret: "sha256=" and the hex digest.
const SignatureHeader = "X-Shoal-Signature"

// Sign returns the SignatureHeader value of body under secret.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// post sends body as JSON to a target's URL. Errors name the URL's host
// only: a Slack URL's path is its secret.
type post struct {
	url    string
	client *http.Client
	// sign, when set, returns the headers body is sent with.
	sign func(body []byte) http.Header
}

func newPoster(u string, sign func([]byte) http.Header) post {
	// Redirects are not followed: a receiver that moved is a config error.
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return post{url: u, client: c, sign: sign}
}

func (p post) do(ctx context.Context, body []byte) error {
	host := "receiver"
	if u, err := url.Parse(p.url); err == nil {
		host = u.Host
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("post to %s: %w", host, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "shoal")
	if p.sign != nil {
		for k, v := range p.sign(body) {
			req.Header[k] = v
		}
	}
	resp, err := p.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL
		}
		return fmt.Errorf("post to %s: %w", host, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("post to %s: %s: %s", host, resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// webhook posts the event's JSON, signed.
type webhook struct{ post }

func newWebhook(t config.NotifyTarget) *webhook {
	secret := []byte(t.Secret)
	return &webhook{newPoster(t.URL, func(body []byte) http.Header {
		h := http.Header{}
		h.Set(SignatureHeader, Sign(secret, body))
		return h
	})}
}

func (w *webhook) send(ctx context.Context, ev event.Event) error {
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	return w.do(ctx, body)
}

// slack posts to an incoming webhook: {"text": ...}.
type slack struct{ post }

func newSlack(t config.NotifyTarget) *slack { return &slack{newPoster(t.URL, nil)} }

func (s *slack) send(ctx context.Context, ev event.Event) error {
	body, err := json.Marshal(map[string]string{"text": text(ev)})
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	return s.do(ctx, body)
}

// text is the event in one line for people.
func text(ev event.Event) string {
	s := "[shoal] " + string(ev.Type)
	if ev.Group != "" {
		s += " " + ev.Group
	}
	return s + ": " + ev.Message
}

// email sends a mail through an SMTP server that must offer STARTTLS.
type email struct {
	t     config.NotifyTarget
	roots *x509.CertPool // nil: the system's
}

func newEmail(t config.NotifyTarget) (*email, error) {
	e := &email{t: t}
	if t.CAFile != "" {
		b, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read ca_file: %w", err)
		}
		e.roots = x509.NewCertPool()
		if !e.roots.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("ca_file %s holds no PEM certificate", t.CAFile)
		}
	}
	return e, nil
}

func (e *email) send(ctx context.Context, ev event.Event) error {
	host, _, err := net.SplitHostPort(e.t.SMTP)
	if err != nil {
		return fmt.Errorf("smtp %s: %w", e.t.SMTP, err)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", e.t.SMTP)
	if err != nil {
		return fmt.Errorf("smtp: %w", err)
	}
	defer conn.Close()
	// The deadline bounds the whole dialogue: net/smtp takes no context.
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	c, err := smtp.NewClient(conn, host)
	if err != nil {
		return fmt.Errorf("smtp %s: %w", e.t.SMTP, err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); !ok {
		return fmt.Errorf("smtp %s does not offer STARTTLS; shoal sends no mail in clear text", e.t.SMTP)
	}
	if err := c.StartTLS(&tls.Config{ServerName: host, RootCAs: e.roots, MinVersion: tls.VersionTLS12}); err != nil {
		return fmt.Errorf("smtp %s: starttls: %w", e.t.SMTP, err)
	}
	if e.t.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", e.t.Username, e.t.Password, host)); err != nil {
			return fmt.Errorf("smtp %s: log in as %s: %w", e.t.SMTP, e.t.Username, err)
		}
	}
	if err := c.Mail(e.t.From); err != nil {
		return fmt.Errorf("smtp %s: MAIL FROM: %w", e.t.SMTP, err)
	}
	for _, to := range e.t.To {
		if err := c.Rcpt(to); err != nil {
			return fmt.Errorf("smtp %s: RCPT TO %s: %w", e.t.SMTP, to, err)
		}
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp %s: DATA: %w", e.t.SMTP, err)
	}
	if _, err := w.Write(e.message(ev)); err != nil {
		return fmt.Errorf("smtp %s: write message: %w", e.t.SMTP, err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp %s: end message: %w", e.t.SMTP, err)
	}
	if err := c.Quit(); err != nil {
		return fmt.Errorf("smtp %s: QUIT: %w", e.t.SMTP, err)
	}
	return nil
}

// message is the mail: the event in one line as the subject, and as JSON
// in the body.
func (e *email) message(ev event.Event) []byte {
	// A message with a line break must not add headers; a header is ASCII,
	// so the subject's "→" goes as an RFC 2047 encoded word.
	subject := mime.QEncoding.Encode("utf-8", strings.NewReplacer("\r", " ", "\n", " ").Replace(text(ev)))
	body, _ := json.MarshalIndent(ev, "", "  ")
	var b bytes.Buffer
	fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nSubject: %s\r\nDate: %s\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n",
		e.t.From, strings.Join(e.t.To, ", "), subject, time.Now().Format(time.RFC1123Z))
	b.WriteString(strings.ReplaceAll(ev.Message, "\n", "\r\n"))
	b.WriteString("\r\n\r\n")
	b.Write(bytes.ReplaceAll(body, []byte("\n"), []byte("\r\n")))
	b.WriteString("\r\n")
	return b.Bytes()
}

// command runs a program with the event's JSON on stdin; no shell.
type command struct{ argv []*template.Template }

func (c *command) send(ctx context.Context, ev event.Event) error {
	args := make([]string, len(c.argv))
	for i, t := range c.argv {
		var b strings.Builder
		if err := t.Execute(&b, ev); err != nil {
			return fmt.Errorf("command argument %d: %w", i, err)
		}
		args[i] = b.String()
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return fmt.Errorf("encode event: %w", err)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin = bytes.NewReader(body)
	// One writer for both: exec then calls it from one goroutine at a time.
	out := &head{max: 512}
	cmd.Stdout, cmd.Stderr = out, out
	// A child that keeps the output open does not hold the notifier.
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("command %s: %w: %s", args[0], err, strings.TrimSpace(strings.ToValidUTF8(string(out.b), "?")))
	}
	return nil
}

// head keeps the first max bytes of a command's output, for its error:
// a chatty command cannot fill the core's memory.
type head struct {
	b   []byte
	max int
}

func (h *head) Write(p []byte) (int, error) {
	h.b = append(h.b, p[:min(len(p), h.max-len(h.b))]...)
	return len(p), nil
}
