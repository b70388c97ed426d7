package tour

import (
	"context"
	"fmt"
	"time"

	"github.com/chromedp/chromedp"
)

// QueueView is what the group page's queue line (limits.max_conn) showed
// while a burst waited in HAProxy's queue and once it was served.
type QueueView struct {
	// Before is the line before the burst; Busiest the line when it
	// showed the most requests waiting (BusiestCurrent); After the line
	// once none waited (AfterMax: the most since HAProxy's reload).
	Before, Busiest, After string
	BusiestCurrent         int
	AfterMax               int
	// Class is the line's class while requests waited ("warn").
	Class string
}

// queueLine reads the queue line: hidden, its text, class and numbers.
const queueLine = `(() => {
  const p = document.querySelector("#group-queue");
  return { hidden: p.hidden, text: p.textContent, cls: p.className, current: Number(p.dataset.current || -1), max: Number(p.dataset.max || -1) };
})()`

type queueRead struct {
	Hidden       bool   `json:"hidden"`
	Text         string `json:"text"`
	Cls          string `json:"cls"`
	Current, Max int
}

// Queue logs in, opens o.Group and reads its queue line while burst runs
// (burst sends the requests that queue and returns once they are served).
func Queue(ctx context.Context, o Options, burst func(context.Context) error) (QueueView, error) {
	var v QueueView
	p, err := Open(ctx, o)
	if err != nil {
		return v, err
	}
	defer p.Close()
	var line queueRead
	if err := p.run("read the queue line",
		chromedp.WaitVisible(`#group-queue`, chromedp.ByQuery),
		chromedp.Evaluate(queueLine, &line),
	); err != nil {
		return v, err
	}
	v.Before = line.Text

	done := make(chan error, 1)
	go func() { done <- burst(ctx) }()
	var burstErr error
	for waiting := true; waiting; {
		select {
		case burstErr = <-done:
			waiting = false
		case <-time.After(100 * time.Millisecond):
		}
		if err := p.run("read the queue line", chromedp.Evaluate(queueLine, &line)); err != nil {
			return v, err
		}
		if line.Current > v.BusiestCurrent {
			v.BusiestCurrent, v.Busiest, v.Class = line.Current, line.Text, line.Cls
		}
	}
	if burstErr != nil {
		return v, fmt.Errorf("dashboard queue: the burst: %w", burstErr)
	}
	if err := p.run("wait for the queue to empty",
		p.poll("the queue is empty", `document.querySelector("#group-queue").dataset.current === "0"`),
		chromedp.Evaluate(queueLine, &line),
	); err != nil {
		return v, err
	}
	v.After, v.AfterMax = line.Text, line.Max
	return v, nil
}

// InstanceState is an instance's state cell on the group page: its text
// and the class that paints it.
type InstanceState struct {
	Text, Class string
}

// InstanceStates waits until ok accepts the open group's instances' state
// cells (by instance name), then returns them.
func (p *Page) InstanceStates(ok func(map[string]InstanceState) bool) (map[string]InstanceState, error) {
	var states map[string]InstanceState
	deadline := time.Now().Add(p.timeout)
	for {
		if err := p.Eval(`Object.fromEntries(Array.from(document.querySelectorAll("#instances tbody tr"), (tr) => {
  const td = tr.querySelectorAll("td")[1];
  return [tr.dataset.instance, { Text: td.textContent, Class: td.className }];
}))`, &states); err != nil {
			return nil, err
		}
		if ok(states) {
			return states, nil
		}
		if time.Now().After(deadline) {
			return states, fmt.Errorf("dashboard: the instances' states never showed what was awaited: %v", states)
		}
		select {
		case <-p.ctx.Done():
			return states, p.ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
