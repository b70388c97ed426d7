package main

import (
	"bytes"
	"fmt"
	"html/template"
)

// pageTmpl is a plain article-and-table page: markup, prose and repeated
// structure in the proportions of a real page, so that it gzips like one.
var pageTmpl = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>shoal demo - {{.Name}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 56rem; padding: 1rem 2rem; color: #1d2330; }
header { border-bottom: 2px solid #2b6cb0; margin-bottom: 1.5rem; }
h1 { font-size: 1.8rem; margin: 0.5rem 0; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #d8dee9; padding: 0.3rem 0.5rem; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
footer { margin-top: 2rem; font-size: 0.85rem; color: #5a6475; }
</style>
</head>
<body>
<header>
<h1>Served by {{.Name}}</h1>
<p>This page comes from the demo instance <strong>{{.Name}}</strong>, one of the identical
instances that shoal starts, health-checks and puts behind HAProxy.</p>
</header>
<main>
<article>
<h2>How this instance got here</h2>
{{range .Paragraphs}}<p>{{.}}</p>
{{end}}</article>
<section>
<h2>Harbour departures</h2>
<table>
<thead><tr><th>#</th><th>Vessel</th><th>Destination</th><th>Berth</th><th class="num">Cargo (t)</th><th>Status</th></tr></thead>
<tbody>
{{range .Rows}}<tr><td>{{.N}}</td><td>{{.Vessel}}</td><td>{{.Destination}}</td><td>{{.Berth}}</td><td class="num">{{.Cargo}}</td><td>{{.Status}}</td></tr>
{{end}}</tbody>
</table>
</section>
</main>
<footer>
<p>Instance {{.Name}} &middot; endpoints: <a href="/healthz">/healthz</a>, <a href="/work?ms=50">/work?ms=50</a></p>
</footer>
</body>
</html>
`))

var paragraphs = []string{
	"A group in shoal is a set of identical instances. When the load grows, shoal starts another instance from the group's template, waits until HAProxy's health check passes, and only then lets it take traffic.",
	"When the load falls, shoal drains an instance first: HAProxy stops sending it new requests, the requests in flight finish, and the process is stopped with SIGTERM. Clients see no errors on the way.",
	"Sizes follow a ladder of plans, each a named number of instances. A scale-up moves one rung up the ladder, a scale-down one rung down, and the cooldowns keep the group from flapping between them.",
	"HAProxy does the forwarding; shoal only talks to it over the runtime API, adding and removing servers as instances come and go, so the data plane never restarts to change the server set.",
}

var (
	vessels      = []string{"Marlin", "Sardine", "Bluefin", "Mackerel", "Anchovy", "Herring", "Bonito", "Snapper"}
	destinations = []string{"Osaka", "Busan", "Kaohsiung", "Manila", "Singapore", "Jakarta", "Sydney", "Honolulu"}
	statuses     = []string{"Boarding", "On time", "Delayed", "Departed"}
)

type pageRow struct {
	N                                  int
	Vessel, Destination, Berth, Status string
	Cargo                              string
}

// pageRows is tuned so that the page weighs about 9 KB.
const pageRows = 62

// renderPage returns the page for the instance called name. The content is a
// function of name alone, so every response from an instance is identical.
func renderPage(name string) []byte {
	rows := make([]pageRow, pageRows)
	for i := range rows {
		rows[i] = pageRow{
			N:           i + 1,
			Vessel:      fmt.Sprintf("%s %d", vessels[i%len(vessels)], 100+i*7),
			Destination: destinations[(i*3)%len(destinations)],
			Berth:       fmt.Sprintf("%c-%02d", 'A'+i%4, (i*5)%17+1),
			Cargo:       fmt.Sprintf("%d,%03d", 1+(i*37)%90, (i*611)%1000),
			Status:      statuses[(i/3)%len(statuses)],
		}
	}
	var buf bytes.Buffer
	err := pageTmpl.Execute(&buf, struct {
		Name       string
		Paragraphs []string
		Rows       []pageRow
	}{name, paragraphs, rows})
	if err != nil {
		// The template and its data are fixed, so this is a programming error.
		panic(fmt.Sprintf("render page: %v", err))
	}
	return buf.Bytes()
}
