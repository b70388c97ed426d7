package canary

import "testing"

func TestBlueGreenNext(t *testing.T) {
	for _, tc := range []struct {
		name string
		from Phase
		o    Observation
		to   Phase
		why  string
	}{
		{"green starting", StartingGreen, Observation{Green: 2, Want: 3}, StartingGreen, ""},
		{"green in service, no analysis: switch", StartingGreen, Observation{Green: 3, Want: 3}, Switched, "every green instance in service"},
		{"green in service, analysis", StartingGreen, Observation{Green: 3, Want: 3, Analysis: true}, Analysing, "every green instance in service"},
		{"promote before green is in service waits", StartingGreen, Observation{Green: 1, Want: 3, Command: CmdPromote}, StartingGreen, ""},
		{"health failure while starting", StartingGreen, Observation{Green: 1, Want: 3, Failure: "web-004 exited"}, RolledBack, "health: web-004 exited"},
		{"abort while starting", StartingGreen, Observation{Want: 3, Command: CmdAbort}, RolledBack, "rolled back by an operator while starting green"},
		{"interrupted while starting", StartingGreen, Observation{Want: 3, Interrupted: true}, RolledBack, "interrupted"},
		{"analysis waiting", Analysing, Observation{Green: 3, Want: 3, Analysis: true, Verdict: Wait}, Analysing, ""},
		{"analysis passed", Analysing, Observation{Green: 3, Want: 3, Analysis: true, Verdict: Pass}, Switched, "analysis passed"},
		{"analysis failed", Analysing, Observation{Green: 3, Want: 3, Analysis: true, Verdict: Fail}, RolledBack, "analysis failed"},
		{"analysis passed, a green instance replaced", Analysing, Observation{Green: 2, Want: 3, Analysis: true, Verdict: Pass}, Analysing, ""},
		{"analysis failed, a green instance replaced", Analysing, Observation{Green: 2, Want: 3, Analysis: true, Verdict: Fail}, RolledBack, "analysis failed"},
		{"promote skips the analysis", Analysing, Observation{Green: 3, Want: 3, Analysis: true, Command: CmdPromote}, Switched, "promoted by an operator"},
		{"rollback while analysing", Analysing, Observation{Green: 3, Want: 3, Command: CmdRollback}, RolledBack, "rolled back by an operator while analysing"},
		{"keeping blue", Switched, Observation{Green: 3, Want: 3}, Switched, ""},
		{"keep_old passed", Switched, Observation{Green: 3, Want: 3, KeepPassed: true}, Done, "keep_old passed"},
		{"promote ends keep_old", Switched, Observation{Green: 3, Want: 3, Command: CmdPromote}, Done, "promoted by an operator"},
		{"rollback while switched", Switched, Observation{Green: 3, Want: 3, Command: CmdRollback}, RolledBack, "rolled back by an operator while switched"},
		{"rollback wins over keep_old passing", Switched, Observation{Green: 3, Want: 3, KeepPassed: true, Command: CmdRollback}, RolledBack, "rolled back by an operator while switched"},
		{"green failing after the switch", Switched, Observation{Green: 2, Want: 3, Failure: "web-005 went DOWN after entering service"}, RolledBack, "health: web-005 went DOWN after entering service"},
		{"interrupted while switched", Switched, Observation{Green: 3, Want: 3, Interrupted: true}, RolledBack, "interrupted"},
		{"done stays", Done, Observation{Command: CmdRollback, Interrupted: true}, Done, ""},
		{"rolled back stays", RolledBack, Observation{Green: 3, Want: 3, KeepPassed: true}, RolledBack, ""},
	} {
		to, why := Next(tc.from, tc.o)
		if to != tc.to || why != tc.why {
			t.Errorf("%s: Next(%q, %+v) = %q, %q; want %q, %q", tc.name, tc.from, tc.o, to, why, tc.to, tc.why)
		}
	}
}
