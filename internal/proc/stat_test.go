package proc

import (
	"fmt"
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields.
	line := "4242 (evil ) name) S 1 4200 4200 0 -1 4194560 100 0 0 0 150 50 7 3 20 0 1 0 12345 1000000 321 18446744073709551615\n"
	st, err := ParseStat([]byte(line))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Stat{PID: 4242, Pgid: 4200, Ticks: 150 + 50 + 7 + 3, StartTicks: 12345, RSSPages: 321}); st != want {
		t.Errorf("ParseStat = %+v, want %+v", st, want)
	}
	for _, bad := range []string{"", "1 (x) S 1 2", "1 x S", "x (x) S 1 2 3 0 0 0 0 0 0 0 1 1 1 1 0 0 1 0 1 1 1", "1 (x) S 1 x 3 0 0 0 0 0 0 0 1 1 1 1 0 0 1 0 1 1 1"} {
		if _, err := ParseStat([]byte(bad)); err == nil {
			t.Errorf("ParseStat(%q) succeeded", bad)
		}
	}
	// This very process.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	st, err = ParseStat(b)
	start, _ := StartTicks(os.Getpid())
	if err != nil || st.PID != os.Getpid() || st.Pgid <= 0 || st.RSSPages <= 0 || st.StartTicks != start || st.Zombie {
		t.Errorf("own stat = %+v, %v (start %d)", st, err, start)
	}
}
