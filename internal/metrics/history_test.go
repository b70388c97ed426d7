package metrics

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/config"
)

func openHistory(t *testing.T, path string) *Collector {
	t.Helper()
	m := config.DefaultMetrics
	m.Ring = 30 * time.Second
	c, err := Open(Options{Metrics: m, Source: &source{[]string{"web"}, func() []Target { return nil }}, DB: path})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func recordTicks(c *Collector, t0 time.Time, from, to int) {
	for i := from; i < to; i++ {
		now := t0.Add(time.Duration(i) * time.Second)
		c.record(context.Background(), now, map[string]float64{
			"web/cpu.avg":     float64(i),
			"web/web-001/cpu": float64(i),
		}, map[string]*groupView{"web": {at: now}}, nil)
	}
}

func describePoints(pts []Point) string {
	s := ""
	for _, p := range pts {
		s += fmt.Sprintf("%d=%g ", p.T.Unix()%1000, p.V)
	}
	return s
}

// TestHistory checks that Points merges the ring with the SQLite roll-ups at
// the finest resolution available, and that the history survives closing and
// reopening the database, a bucket cut by the restart included.
func TestHistory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.db")
	// A minute boundary whose unix time ends in 000, for readable output.
	t0 := time.Unix(1_700_000_000-1_700_000_000%6000+6000, 0)
	c := openHistory(t, path)
	recordTicks(c, t0, 0, 176)

	// The ring holds ticks 146..175; before them come 10 s buckets.
	pts := c.Points("web/cpu.avg", t0, t0.Add(time.Hour))
	if len(pts) != 15+30 {
		t.Fatalf("points: %d: %s", len(pts), describePoints(pts))
	}
	if p := pts[0]; !p.T.Equal(t0) || p.V != 4.5 {
		t.Errorf("first point %v = %v, want the 10 s average 4.5 at %v", p.T, p.V, t0)
	}
	if p := pts[14]; !p.T.Equal(t0.Add(140*time.Second)) || p.V != 144.5 {
		t.Errorf("last bucket %v = %v", p.T, p.V)
	}
	if p := pts[15]; !p.T.Equal(t0.Add(146*time.Second)) || p.V != 146 {
		t.Errorf("first ring point %v = %v", p.T, p.V)
	}
	if maxes := c.Points("web/cpu.avg:max", t0, t0.Add(100*time.Second)); len(maxes) != 11 || maxes[0].V != 9 || maxes[10].V != 109 {
		t.Errorf("maxima: %s", describePoints(maxes))
	}
	// Instance series are kept at 1 minute; the unfinished minute is not
	// written yet (with the default 1 h ring, the ring covers it).
	inst := c.Points("web/web-001/cpu", t0, t0.Add(time.Hour))
	if len(inst) != 2+30 || inst[0].V != 29.5 || inst[1].V != 89.5 {
		t.Errorf("instance points: %s", describePoints(inst))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}

	// After a restart the ring is empty and everything comes from SQLite,
	// including the buckets that were unfinished at Close.
	c = openHistory(t, path)
	defer c.Close()
	pts = c.Points("web/cpu.avg", t0, t0.Add(time.Hour))
	if len(pts) != 18 || pts[17].V != 172.5 {
		t.Fatalf("after reopening: %s", describePoints(pts))
	}
	inst = c.Points("web/web-001/cpu", t0, t0.Add(time.Hour))
	if len(inst) != 3 || inst[2].V != 147.5 {
		t.Errorf("instance after reopening: %s", describePoints(inst))
	}
	// The rest of the cut bucket merges with its first part.
	recordTicks(c, t0, 176, 181)
	pts = c.Points("web/cpu.avg", t0, t0.Add(170*time.Second))
	if len(pts) != 18 || pts[17].V != 174.5 {
		t.Errorf("merged bucket: %s", describePoints(pts))
	}
	maxes := c.Points("web/cpu.avg:max", t0.Add(170*time.Second), t0.Add(170*time.Second))
	if len(maxes) != 1 || maxes[0].V != 179 {
		t.Errorf("merged bucket max: %s", describePoints(maxes))
	}
}

// TestHistoryAfterKill: a core killed mid-bucket never writes that bucket's
// first part; the restarted core's samples of the same bucket are in its ring
// and must not come back as the bucket's row, stamped at its start, claiming
// the seconds the kill lost (a policy would read them as covered).
func TestHistoryAfterKill(t *testing.T) {
	path := filepath.Join(t.TempDir(), "metrics.db")
	t0 := time.Unix(1_700_000_000-1_700_000_000%6000+6000, 0)
	c := openHistory(t, path)
	recordTicks(c, t0, 0, 175) // buckets to 160 written; 170..174 unfinished
	for _, r := range c.rollups {
		clear(r.accs) // kill -9: the unfinished buckets die with the process
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	c = openHistory(t, path)
	defer c.Close()
	recordTicks(c, t0, 178, 183) // 178, 179 finish bucket 170 in this core
	pts := c.Points("web/cpu.avg", t0.Add(150*time.Second), t0.Add(183*time.Second))
	want := []int64{150, 160, 178, 179, 180, 181, 182}
	if len(pts) != len(want) {
		t.Fatalf("points %s, want at %v", describePoints(pts), want)
	}
	for i, p := range pts {
		if p.T.Unix()-t0.Unix() != want[i] {
			t.Errorf("point %d at %d, want %d: %s", i, p.T.Unix()-t0.Unix(), want[i], describePoints(pts))
		}
	}
}

// TestHistoryPrune checks that buckets older than their level's retention
// are deleted while the coarser level keeps them.
func TestHistoryPrune(t *testing.T) {
	c := openHistory(t, filepath.Join(t.TempDir(), "metrics.db"))
	defer c.Close()
	now := time.Now().Truncate(time.Minute)
	old := now.Add(-25 * time.Hour)
	recordTicks(c, old, 0, 61)                      // finishes 10 s and 1 m buckets 25 h ago
	recordTicks(c, now.Add(-30*time.Second), 0, 30) // prunes: more than 10 minutes later
	ctx := context.Background()
	if p, err := c.db.read(ctx, &level10s, "web/cpu.avg", old, old.Add(time.Hour)); err != nil || len(p) != 0 {
		t.Errorf("10 s buckets 25 h old: %v, %v", p, err)
	}
	if p, err := c.db.read(ctx, &level1m, "web/cpu.avg", old, old.Add(time.Hour)); err != nil || len(p) != 2 {
		t.Errorf("1 m buckets 25 h old: %v, %v", p, err)
	}
	// Instance series keep at most a day even at 1 minute.
	if p, err := c.db.read(ctx, &level1m, "web/web-001/cpu", old, old.Add(time.Hour)); err != nil || len(p) != 0 {
		t.Errorf("instance buckets 25 h old: %v, %v", p, err)
	}
	if pts := c.Points("web/cpu.avg", old, old.Add(time.Hour)); len(pts) != 2 || pts[0].V != 29.5 || pts[1].V != 60 {
		t.Errorf("Points 25 h ago: %s", describePoints(pts))
	}
}

// TestServersCPU checks the sacloud-cpu-usage input built from history:
// ready instances matching the prefix, their CPU averaged per step and
// turned into cores' worth.
func TestServersCPU(t *testing.T) {
	c := openHistory(t, filepath.Join(t.TempDir(), "metrics.db"))
	defer c.Close()
	c.opts.Ring = time.Hour
	c.ring = newRing(3600)
	t0 := time.Now().Add(-20 * time.Minute).Truncate(5 * time.Minute)
	insts := []instanceView{
		{Target{Group: "web", Name: "web-001", Cores: 2, InService: true}, true},
		{Target{Group: "web", Name: "web-002", Cores: 1, InService: true}, true},
		{Target{Group: "web", Name: "web-003", Cores: 1, State: "starting"}, false},
	}
	for i := range 600 { // 10 minutes
		now := t0.Add(time.Duration(i) * time.Second)
		v := 10.0
		if i >= 300 {
			v = 30
		}
		c.record(context.Background(), now, map[string]float64{
			"web/web-001/cpu": v, "web/web-002/cpu": 2 * v, "web/web-003/cpu": 100,
		}, map[string]*groupView{"web": {at: now, instances: insts}}, nil)
	}
	jst := time.FixedZone("JST", 9*3600)
	servers := c.ServersCPU("web-00", 10*time.Minute, 5*time.Minute, jst)
	got := ""
	for _, s := range servers {
		got += fmt.Sprintf("%s cores:%v", s.Name, s.Cores)
		for _, p := range s.Samples {
			got += fmt.Sprintf(" %s=%.3f", p.Time.Format("15:04 MST"), p.CPUTime)
		}
		got += "\n"
	}
	t1, t2 := t0.In(jst).Format("15:04 MST"), t0.Add(5*time.Minute).In(jst).Format("15:04 MST")
	want := fmt.Sprintf("web-001 cores:2 %s=0.200 %s=0.600\nweb-002 cores:1 %s=0.200 %s=0.600\n", t1, t2, t1, t2)
	if got != want {
		t.Errorf("ServersCPU:\n%s\nwant\n%s", got, want)
	}
	u := NewCPUUsage(servers, nil)
	if u.Avg != 30 || u.Min != 20 || u.Max != 40 || len(u.Servers) != 2 {
		t.Errorf("CPUUsage: %+v", u)
	}
	if pts := c.ForGroup("web").Points("nothing", t0, t0.Add(time.Hour)); len(pts) != 0 {
		t.Errorf("unknown metric: %v", pts)
	}
}

// TestDocumentTimeWeighted: a window that mixes the ring's 1 s samples with
// 10 s and 1 min roll-ups weighs each by the seconds it stands for. Over
// 24 h, 23 h at 10 req/s (12 h of 1 min rows, 11 h of 10 s rows) and the last
// hour at 100 req/s (the ring) average (23·10 + 100) / 24 = 13.75 req/s, not
// the 37.3 of counting a row as one sample. Instance CPU (1 min rows, then
// the ring) is 20 % for 23 h and 80 % for the last hour: 22.5 %.
func TestDocumentTimeWeighted(t *testing.T) {
	c := openHistory(t, filepath.Join(t.TempDir(), "metrics.db"))
	defer c.Close()
	c.opts.Ring = time.Hour
	c.opts.Instances = 24 * time.Hour // a day of the instance's rows is read back
	c.ring = newRing(3600)
	ctx := context.Background()
	// On a 4 h boundary, so that one 4 h period of ServersCPU holds the
	// last 2 h.
	end := time.Now().Truncate(4 * time.Hour)
	from := end.Add(-24 * time.Hour)
	ringFrom := end.Add(-time.Hour)

	var rows []row
	add := func(lv *level, path string, t time.Time, n int64, v float64) {
		rows = append(rows, row{level: lv, path: path, t: t, acc: bucketAcc{n: n, sum: v * float64(n), max: v}})
	}
	for t := from; t.Before(ringFrom); t = t.Add(time.Minute) {
		add(&level1m, "web/web-001/cpu", t, 60, 20)
		if t.Before(from.Add(12 * time.Hour)) {
			add(&level1m, "web/requests_per_second", t, 60, 10)
		}
	}
	for t := from.Add(12 * time.Hour); t.Before(ringFrom); t = t.Add(10 * time.Second) {
		add(&level10s, "web/requests_per_second", t, 10, 10)
	}
	if err := c.db.write(ctx, rows); err != nil {
		t.Fatal(err)
	}
	// The ring's hour goes through record, as sampling does; its roll-ups
	// land after the rows above and are read from the ring instead.
	c.rollups = nil
	inst := []instanceView{{Target{Group: "web", Name: "web-001", Cores: 1, State: "in-service", InService: true, ReadySince: from.Add(-time.Hour)}, true}}
	for i := range 3600 {
		now := ringFrom.Add(time.Duration(i) * time.Second)
		c.record(ctx, now, map[string]float64{"web/requests_per_second": 100, "web/web-001/cpu": 80},
			map[string]*groupView{"web": {at: now, instances: inst}}, nil)
	}

	doc, err := c.Document(ctx, "web", 24*time.Hour, "")
	if err != nil {
		t.Fatal(err)
	}
	near := func(what string, got *float64, want float64) {
		t.Helper()
		if got == nil || math.Abs(*got-want) > 0.01 {
			t.Errorf("%s = %v, want %g", what, deref(got), want)
		}
	}
	near("requests_per_second", doc.RequestsPerSecond, 13.75)
	near("instance cpu avg", doc.Instances[0].CPU.Avg, 22.5)
	near("instance cpu max", doc.Instances[0].CPU.Max, 80)
	near("cpu.avg", doc.CPU.Avg, 22.5)
	near("cpu.p90", doc.CPU.P90, 22.5)

	// sacloud-cpu-usage's monitors too: one period holding an hour of 1 min
	// rows at 20 % and an hour of the ring at 80 % averages 50 %.
	servers := c.ServersCPU("web-", 2*time.Hour, 4*time.Hour, time.UTC)
	if len(servers) != 1 || len(servers[0].Samples) == 0 {
		t.Fatalf("ServersCPU: %+v", servers)
	}
	if u := NewCPUUsage(servers, nil); len(servers[0].Samples) != 1 || math.Abs(u.Avg-50) > 0.01 {
		t.Errorf("cpu-usage over 2h in one period: %+v, avg %g; want one monitor at 50 (an hour at 20 %%, an hour at 80 %%)", servers[0].Samples, u.Avg)
	}
}

// TestHistoryFreshMinute: a core started at second 53 of a minute writes
// that minute's row when it ends, while its ring still holds each of those
// seconds; the row, stamped at second 0, must not come back before them (a
// chart fitted to the history would start 53 s before the first sample).
func TestHistoryFreshMinute(t *testing.T) {
	m := config.DefaultMetrics // a ring of an hour
	c, err := Open(Options{Metrics: m, Source: &source{[]string{"web"}, func() []Target { return nil }}, DB: filepath.Join(t.TempDir(), "metrics.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t0 := time.Unix(1_700_000_000-1_700_000_000%6000+6000, 0)
	recordTicks(c, t0, 53, 100)
	pts := c.Points("web/cpu.avg", t0, t0.Add(100*time.Second))
	if len(pts) != 47 || !pts[0].T.Equal(t0.Add(53*time.Second)) {
		t.Fatalf("points: %s; want the ring's 47 from second 53", describePoints(pts))
	}
	s := c.Series("web", []string{"cpu.avg"}, t0.Add(99*time.Second), time.Hour, 360)
	if s.Times[0] != t0.Add(53*time.Second).Unix() {
		t.Errorf("series from %d, want from the first sample, %d", s.Times[0], t0.Add(53*time.Second).Unix())
	}
}
