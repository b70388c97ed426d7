package notify

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"math/big"
	"mime"
	"net"
	netmail "net/mail"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/event"
	"github.com/shoal-lb/shoal/internal/store"
)

// selfSigned returns a certificate for 127.0.0.1 and the path of its PEM,
// the CA a target trusts through ca_file.
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "smtp sink"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, path
}

// mail is what the sink received in one transaction.
type mail struct {
	from string
	to   []string
	data string
	tls  bool
	user string
}

// smtpSink is an SMTP server on 127.0.0.1 that offers STARTTLS (unless
// plain) and AUTH PLAIN after it, and keeps what it is sent.
type smtpSink struct {
	ln         net.Listener
	cert       tls.Certificate
	plain      bool
	user, pass string

	wg    sync.WaitGroup
	mu    sync.Mutex
	mails []mail
	verbs []string
}

func newSMTPSink(t *testing.T, cert tls.Certificate, plain bool) *smtpSink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &smtpSink{ln: ln, cert: cert, plain: plain, user: "shoal", pass: "mail-pw"}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.session(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.wg.Wait()
	})
	return s
}

func (s *smtpSink) session(c net.Conn) {
	defer func() { c.Close() }()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	tp := textproto.NewConn(c)
	secure, user := false, ""
	var m mail
	reply := func(format string, args ...any) { _ = tp.PrintfLine(format, args...) }
	reply("220 127.0.0.1 sink ESMTP")
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return
		}
		verb, arg, _ := strings.Cut(line, " ")
		verb = strings.ToUpper(verb)
		s.mu.Lock()
		s.verbs = append(s.verbs, verb)
		s.mu.Unlock()
		switch verb {
		case "EHLO", "HELO":
			ext := []string{"127.0.0.1"}
			if !secure && !s.plain {
				ext = append(ext, "STARTTLS")
			}
			if secure {
				ext = append(ext, "AUTH PLAIN")
			}
			for i, e := range ext {
				sep := "-"
				if i == len(ext)-1 {
					sep = " "
				}
				reply("250%s%s", sep, e)
			}
		case "STARTTLS":
			reply("220 ready to start TLS")
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{s.cert}})
			if err := tc.Handshake(); err != nil {
				return
			}
			c, tp, secure = tc, textproto.NewConn(tc), true
		case "AUTH":
			mech, resp, _ := strings.Cut(arg, " ")
			b, err := base64.StdEncoding.DecodeString(resp)
			parts := strings.Split(string(b), "\x00")
			if !secure || mech != "PLAIN" || err != nil || len(parts) != 3 || parts[1] != s.user || parts[2] != s.pass {
				reply("535 authentication failed")
				continue
			}
			user = parts[1]
			reply("235 authenticated")
		case "MAIL":
			m = mail{from: arg, tls: secure, user: user}
			reply("250 ok")
		case "RCPT":
			m.to = append(m.to, arg)
			reply("250 ok")
		case "DATA":
			reply("354 go ahead")
			b, err := tp.ReadDotBytes()
			if err != nil {
				return
			}
			m.data = string(b)
			s.mu.Lock()
			s.mails = append(s.mails, m)
			s.mu.Unlock()
			reply("250 queued")
		case "QUIT":
			reply("221 bye")
			return
		default:
			reply("502 not implemented")
		}
	}
}

func (s *smtpSink) received() ([]mail, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]mail(nil), s.mails...), append([]string(nil), s.verbs...)
}

// TestEmailSTARTTLS: an email target delivers a queued event through a
// real SMTP server: STARTTLS with the server's certificate checked against
// ca_file, AUTH PLAIN only inside TLS, then the mail.
func TestEmailSTARTTLS(t *testing.T) {
	cert, ca := selfSigned(t)
	sink := newSMTPSink(t, cert, false)
	pw := filepath.Join(t.TempDir(), "smtp.pw")
	if err := os.WriteFile(pw, []byte("mail-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := parse(t, `notify:
  targets:
    - name: mail
      type: email
      smtp: `+sink.ln.Addr().String()+`
      from: shoal@example.com
      to: [ops@example.com, oncall@example.com]
      username: shoal
      password_file: `+pw+`
      ca_file: `+ca+`
      events: [instance.*]
`)
	st, err := store.Open(filepath.Join(t.TempDir(), "shoal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := start(t, cfg, st)
	recordLaunch(t, st, "web", "web-001")
	eventually(t, "the mail", func() bool { m, _ := sink.received(); return len(m) == 1 })
	m, _ := sink.received()
	got := m[0]
	if !got.tls || got.user != "shoal" || got.from != "FROM:<shoal@example.com>" || strings.Join(got.to, ",") != "TO:<ops@example.com>,TO:<oncall@example.com>" {
		t.Errorf("mail %+v", got)
	}
	for _, want := range []string{
		"Subject: [shoal] instance.launched web: web-001 launched at 127.0.0.1:9001\n",
		"From: shoal@example.com\n", "To: ops@example.com, oncall@example.com\n",
		`"type": "instance.launched"`, `"subject": "web-001"`,
	} {
		if !strings.Contains(got.data, want) {
			t.Errorf("mail lacks %q:\n%s", want, got.data)
		}
	}
	eventually(t, "the delivery counted", func() bool { return count(t, n.delivered, "target", "mail") == 1 })
}

// TestEmailRefusesCleartext: a server without STARTTLS gets no mail, and
// one whose certificate the target does not trust gets no credentials.
func TestEmailRefusesCleartext(t *testing.T) {
	cert, ca := selfSigned(t)
	ev := event.Event{Type: event.HostDown, Subject: "10.0.0.2", Message: "host 10.0.0.2 down"}
	for _, tt := range []struct {
		name  string
		plain bool
		ca    string
		want  string
	}{
		{"no STARTTLS", true, ca, "does not offer STARTTLS; shoal sends no mail in clear text"},
		{"untrusted certificate", false, "", "starttls: tls: failed to verify certificate"},
	} {
		sink := newSMTPSink(t, cert, tt.plain)
		trust := ""
		if tt.ca != "" {
			trust = `, ca_file: "` + tt.ca + `"`
		}
		cfg := parse(t, `notify:
  targets:
    - {name: mail, type: email, smtp: "`+sink.ln.Addr().String()+`", from: a@example.com, to: [b@example.com]`+trust+`}
`)
		e, err := newEmail(cfg.Targets[0])
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = e.send(ctx, ev)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: send = %v; want %q", tt.name, err, tt.want)
		}
		if _, verbs := sink.received(); strings.Contains(strings.Join(verbs, " "), "MAIL") || strings.Contains(strings.Join(verbs, " "), "AUTH") {
			t.Errorf("%s: the client went on: %v", tt.name, verbs)
		}
	}
}

// TestEmailSubjectEncoded: a subject with non-ASCII text ("→") is an RFC
// 2047 encoded word that a mail reader decodes to the event's line, and a
// line break in the message adds no header.
func TestEmailSubjectEncoded(t *testing.T) {
	e := &email{t: config.NotifyTarget{From: "shoal@example.com", To: []string{"ops@example.com"}}}
	ev := event.Event{Type: event.ScaleFinished, Group: "web", Message: "web: scale up 1 → 2\nBcc: evil@example.com"}
	raw := e.message(ev)
	for i, c := range raw {
		if c > 0x7f && bytes.Index(raw, []byte("\r\n\r\n")) > i {
			t.Fatalf("header byte %d is not ASCII:\n%s", i, raw)
		}
	}
	m, err := netmail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	subject, err := new(mime.WordDecoder).DecodeHeader(m.Header.Get("Subject"))
	if want := "[shoal] scale.finished web: web: scale up 1 → 2 Bcc: evil@example.com"; err != nil || subject != want {
		t.Errorf("subject %q (%v), want %q", subject, err, want)
	}
	if b := m.Header.Get("Bcc"); b != "" {
		t.Errorf("the message added a Bcc header: %q", b)
	}
}
