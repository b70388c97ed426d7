// Command standin is an instance that costs as little as an instance can:
// it answers every HTTP/1.1 request on its address with 200 "ok" (keep-alive
// kept), and nothing else. The scale benchmark and its e2e test run a
// thousand of them where a thousand demo-backends (about 10 MB each) would
// not fit: it imports net alone and keeps no buffers between requests.
//
//	standin 127.0.0.1:PORT
package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const answer = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n"

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: standin 127.0.0.1:PORT")
		os.Exit(2)
	}
	ln, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, "standin:", err)
		os.Exit(1)
	}
	// SIGTERM (shoal's stop) ends it at once: nothing it serves is long.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() { <-sig; ln.Close() }()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go serve(c)
	}
}

// serve answers each request on c (headers only: HAProxy's checks and the
// benchmark's GETs have no body) until the client closes or idles 30 s.
func serve(c net.Conn) {
	defer c.Close()
	r := bufio.NewReaderSize(c, 1024)
	for {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		closeAfter := false
		for first := true; ; first = false {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if first && bytes.Contains(line, []byte("HTTP/1.0")) {
				closeAfter = true
			}
			if bytes.HasPrefix(bytes.ToLower(line), []byte("connection: close")) {
				closeAfter = true
			}
			if len(bytes.TrimSpace(line)) == 0 && !first {
				break
			}
		}
		if _, err := c.Write([]byte(answer)); err != nil || closeAfter {
			return
		}
	}
}
