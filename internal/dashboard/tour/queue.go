package tour

import (
	"context"
	"fmt"
	"os"
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

// openGroup starts a headless browser, logs in and opens o.Group's page;
// the returned context is the browser's, alive until cancel.
func openGroup(ctx context.Context, o *Options) (context.Context, context.CancelFunc, error) {
	bin, err := Browser()
	if err != nil {
		return nil, nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-dev-shm-usage", true))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	cancel := func() { cancelBrowser(); cancelAlloc() }
	// The first Run starts the browser, which lives as long as the context
	// it was given: bctx, not a step's.
	if err := chromedp.Run(bctx); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("dashboard: start %s: %w", bin, err)
	}
	tctx, cancelStep := context.WithTimeout(bctx, 2*o.Timeout)
	defer cancelStep()
	if err := chromedp.Run(tctx, append(logIn(*o), chromedp.WaitVisible(`#instances tbody tr`, chromedp.ByQuery))...); err != nil {
		cancel()
		return nil, nil, fmt.Errorf("dashboard: log in and open group %s: %w", o.Group, err)
	}
	return bctx, cancel, nil
}

// Queue logs in, opens o.Group and reads its queue line while burst runs
// (burst sends the requests that queue and returns once they are served).
func Queue(ctx context.Context, o Options, burst func(context.Context) error) (QueueView, error) {
	var v QueueView
	bctx, cancel, err := openGroup(ctx, &o)
	if err != nil {
		return v, err
	}
	defer cancel()
	var line queueRead
	if err := chromedp.Run(bctx,
		chromedp.WaitVisible(`#group-queue`, chromedp.ByQuery),
		chromedp.Evaluate(queueLine, &line),
	); err != nil {
		return v, fmt.Errorf("dashboard queue: read the line: %w", err)
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
		if err := chromedp.Run(bctx, chromedp.Evaluate(queueLine, &line)); err != nil {
			return v, fmt.Errorf("dashboard queue: read the line: %w", err)
		}
		if line.Current > v.BusiestCurrent {
			v.BusiestCurrent, v.Busiest, v.Class = line.Current, line.Text, line.Cls
		}
	}
	if burstErr != nil {
		return v, fmt.Errorf("dashboard queue: the burst: %w", burstErr)
	}
	tctx, cancelStep := context.WithTimeout(bctx, o.Timeout)
	defer cancelStep()
	if err := chromedp.Run(tctx,
		chromedp.Poll(`(() => { const p = document.querySelector("#group-queue"); return p.dataset.current === "0"; })()`, nil,
			chromedp.WithPollingInterval(100*time.Millisecond)),
		chromedp.Evaluate(queueLine, &line),
	); err != nil {
		return v, fmt.Errorf("dashboard queue: wait for the queue to empty: %w", err)
	}
	v.After, v.AfterMax = line.Text, line.Max
	return v, nil
}

// InstanceState is an instance's state cell on the group page: its text
// and the class that paints it.
type InstanceState struct {
	Text, Class string
}

// InstanceStates logs in, opens o.Group and waits until ok accepts its
// instances' state cells (by instance name), then returns them.
func InstanceStates(ctx context.Context, o Options, ok func(map[string]InstanceState) bool) (map[string]InstanceState, error) {
	bctx, cancel, err := openGroup(ctx, &o)
	if err != nil {
		return nil, err
	}
	defer cancel()
	var states map[string]InstanceState
	deadline := time.Now().Add(o.Timeout)
	for {
		err := chromedp.Run(bctx, chromedp.Evaluate(`Object.fromEntries(Array.from(document.querySelectorAll("#instances tbody tr"), (tr) => {
  const td = tr.querySelectorAll("td")[1];
  return [tr.dataset.instance, { Text: td.textContent, Class: td.className }];
}))`, &states))
		if err != nil {
			return nil, fmt.Errorf("dashboard: read the instances: %w", err)
		}
		if ok(states) {
			return states, nil
		}
		if time.Now().After(deadline) {
			return states, fmt.Errorf("dashboard: the instances' states never showed what was awaited: %v", states)
		}
		select {
		case <-ctx.Done():
			return states, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
