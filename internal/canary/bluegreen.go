package canary

// A blue/green deploy's phases and what moves it from one to the next: the
// pure part of group/bluegreen.go, which observes the instances, HAProxy
// and the operator and acts on each transition.
//
//	       Deploy(T)
//	           |
//	           v
//	  +-----------------+  every green instance (as many as the group's
//	  | starting green  |  size, from T, out of rotation) in service
//	  +-----------------+-------------------------+
//	     |                  with an analysis      | without
//	     |                        v               |
//	     |               +-----------------+      |
//	     |               | analysing: green|      |
//	     |               | at weight W %   |      |
//	     |               +-----------------+      |
//	     |                 |  | passed, or promote|
//	     |                 |  v                   v
//	     |                 | +----------------------------+  keep_old passed,
//	     |                 | | switched: green 100 %,     |  or promote
//	     |                 | | blue out of rotation,      |----------+
//	     |                 | | kept until keep_old        |          v
//	     |                 | +----------------------------+   +-------------+
//	     |                 |        |                         | done: T     |
//	     | health failure, |        | rollback, abort, health | serves,     |
//	     | abort, rollback,| fails  | failure of green, the   | blue drained|
//	     | interrupted     |        | job interrupted         | and stopped |
//	     v                 v        v                         +-------------+
//	  +----------------------------------------------------+
//	  | rolled back: blue back in rotation first, then     |
//	  | green drained and stopped; S serves                |
//	  +----------------------------------------------------+

// Phase is a blue/green deploy's phase, as status shows it.
type Phase string

// Phases.
const (
	StartingGreen Phase = "starting green"
	Analysing     Phase = "analysing"
	Switched      Phase = "switched"
	Done          Phase = "done"
	RolledBack    Phase = "rolled back"
)

// Ended reports whether p is a last phase.
func (p Phase) Ended() bool { return p == Done || p == RolledBack }

// Operators' commands to a blue/green deploy.
const (
	CmdRollback = "rollback"
	CmdAbort    = "abort"
	CmdPromote  = "promote"
)

// Observation is what a blue/green deploy's next phase is decided from.
type Observation struct {
	// Green counts the green set's instances in service; Want is how many
	// it must have (the group's size).
	Green, Want int
	// Analysis is whether the deploy analyses green before the switch.
	Analysis bool
	// Verdict is the analysis's last one (Wait before the first).
	Verdict Verdict
	// Failure is green's health failure ("" while there is none).
	Failure string
	// KeepPassed: keep_old has passed since the switch.
	KeepPassed bool
	// Command is an operator's (CmdRollback, CmdAbort, CmdPromote; "").
	Command string
	// Interrupted: the deploy's job ended (its timeout, shoal stopping).
	Interrupted bool
}

// Next returns the phase after p given o, and why it moved ("" when it
// stays). An ended phase stays.
func Next(p Phase, o Observation) (Phase, string) {
	if p.Ended() {
		return p, ""
	}
	switch {
	case o.Interrupted:
		return RolledBack, "interrupted"
	case o.Command == CmdRollback || o.Command == CmdAbort:
		return RolledBack, "rolled back by an operator while " + string(p)
	case o.Failure != "":
		return RolledBack, "health: " + o.Failure
	}
	switch p {
	case StartingGreen:
		if o.Green < o.Want {
			return p, ""
		}
		if o.Analysis {
			return Analysing, "every green instance in service"
		}
		return Switched, "every green instance in service"
	case Analysing:
		switch {
		case o.Verdict == Fail:
			return RolledBack, "analysis failed"
		case o.Green < o.Want:
			return p, "" // a green instance is being replaced
		case o.Command == CmdPromote:
			return Switched, "promoted by an operator"
		case o.Verdict == Pass:
			return Switched, "analysis passed"
		}
	case Switched:
		switch {
		case o.Command == CmdPromote:
			return Done, "promoted by an operator"
		case o.KeepPassed:
			return Done, "keep_old passed"
		}
	}
	return p, ""
}
