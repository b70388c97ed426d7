package api

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"

	"github.com/shoal-lb/shoal/internal/group"
)

const hostile = `<script>alert("x")</script>&<b onclick='y'>`

func sampleStatus(now time.Time) StatusResponse {
	changed := now.Add(-90 * time.Second)
	return StatusResponse{Groups: []group.Status{{
		Name: "web", Plan: "small", Desired: 2, MinSize: 1, MaxSize: 4, InService: 1,
		Instances: []group.InstanceStatus{
			{Name: "web-001", CloudID: "113301705264", Addr: "127.0.0.1:4001", State: group.InService, Health: "UP", Check: "L7OK",
				CheckCode: 200, CheckDurationMS: 3, CheckDesc: "Layer7 check passed", LastChange: &changed,
				Sessions: 1, Requests: 42, PID: 100, StartedAt: now.Add(-time.Hour), Version: "v2",
				Waiting: "waiting for the cloud API: " + hostile},
			{Name: "web-002", Addr: "127.0.0.1:4002", State: group.Starting, Health: "DOWN", Check: "L7STS",
				CheckCode: 500, CheckDesc: "Layer7 wrong status", CheckReason: hostile, LastChange: &changed, PID: 101, Version: "1a2b3c4d5e6f"},
		},
		LastFailures: []group.Failure{{Instance: "web-003", Reason: hostile, At: now}},
		HAProxyError: hostile,
	}}}
}

// TestStatusHTML parses the page as HTML: hostile strings from instances
// stay text, and the table holds one row per instance.
func TestStatusHTML(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if err := WriteStatus(&buf, "html", sampleStatus(now), now); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	var (
		rows      [][]string
		downRows  int
		elements  = map[string]int{}
		hostileIn int
	)
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			elements[n.Data]++
			for _, a := range n.Attr {
				if strings.HasPrefix(a.Key, "on") {
					t.Errorf("element %s has event attribute %s", n.Data, a.Key)
				}
			}
			if n.Data == "tr" && n.Parent != nil && n.Parent.Data == "tbody" {
				var cells []string
				for c := n.FirstChild; c != nil; c = c.NextSibling {
					if c.Type == html.ElementNode && c.Data == "td" {
						cells = append(cells, text(c))
					}
				}
				rows = append(rows, cells)
				for _, a := range n.Attr {
					if a.Key == "class" && a.Val == "down" {
						downRows++
					}
				}
			}
		}
		if n.Type == html.TextNode && strings.Contains(n.Data, hostile) {
			hostileIn++
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)

	if elements["script"] != 0 || elements["b"] != 0 {
		t.Errorf("hostile markup became elements: %v\n%s", elements, buf.String())
	}
	// The reason, the failure, the HAProxy error and why a retiring
	// instance still serves, each as text.
	if hostileIn != 4 {
		t.Errorf("hostile string appears as text %d times, want 4:\n%s", hostileIn, buf.String())
	}
	if !strings.Contains(buf.String(), "retiring web-001, still in service: waiting for the cloud API: ") {
		t.Errorf("page does not say web-001 is retiring and waiting for the cloud API:\n%s", buf.String())
	}
	want := [][]string{
		{"web-001", "127.0.0.1:4001", "in-service", "UP", "L7OK", "200", "3ms", "Layer7 check passed", "", "1m30s ago", "1", "42", "100", "v2", "113301705264"},
		{"web-002", "127.0.0.1:4002", "starting", "DOWN", "L7STS", "500", "", "Layer7 wrong status", hostile, "1m30s ago", "0", "0", "101", "1a2b3c4d5e6f", ""},
	}
	if !reflect.DeepEqual(rows, want) {
		t.Errorf("rows:\n got %q\nwant %q", rows, want)
	}
	if downRows != 1 {
		t.Errorf("%d rows marked down, want 1", downRows)
	}
}

func text(n *html.Node) string {
	var b strings.Builder
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		if c.Type == html.TextNode {
			b.WriteString(c.Data)
		}
	}
	return b.String()
}

func TestStatusCSV(t *testing.T) {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC)
	var buf bytes.Buffer
	if err := WriteStatus(&buf, "csv", sampleStatus(now), now); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		StatusCSVHeader,
		{"web", "web-001", "127.0.0.1:4001", "in-service", "UP", "L7OK", "200", "3", "Layer7 check passed", "",
			"2026-11-23T09:58:30Z", "1", "42", "100", "2026-11-23T09:00:00Z", "v2", "113301705264"},
		{"web", "web-002", "127.0.0.1:4002", "starting", "DOWN", "L7STS", "500", "", "Layer7 wrong status", hostile,
			"2026-11-23T09:58:30Z", "0", "0", "101", "", "1a2b3c4d5e6f", ""},
	}
	if !reflect.DeepEqual(recs, want) {
		t.Errorf("CSV:\n got %q\nwant %q", recs, want)
	}
}

func TestStatusJSONAndUnknownFormat(t *testing.T) {
	now := time.Now()
	var buf bytes.Buffer
	if err := WriteStatus(&buf, "json", sampleStatus(now), now); err != nil {
		t.Fatal(err)
	}
	var back StatusResponse
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if in := back.Groups[0].Instances[1]; in.CheckCode != 500 || in.CheckReason != hostile || in.LastChange == nil {
		t.Errorf("JSON round trip lost check fields: %+v", in)
	}
	if err := WriteStatus(&buf, "xml", sampleStatus(now), now); err == nil || !strings.Contains(err.Error(), "valid: html, csv, json") {
		t.Errorf("unknown format: %v", err)
	}
}
