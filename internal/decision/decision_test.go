package decision

import (
	"encoding/json"
	"testing"
)

// TestRecordJSONRoundTrip: `shoal events -o json` decodes the API's events
// into Records and prints them again; what it prints is what the API sent,
// and no sources or values read back print as [] and {}, not null.
func TestRecordJSONRoundTrip(t *testing.T) {
	for _, wire := range []string{
		`{"id":7,"time":"2026-11-23T10:24:55Z","group":"web","rule":"hot","sources":["hot"],"values":{"cpu.avg":134.4},"current":1,"recommendation":2,"request":{"kind":"up","plan":"","size":0,"source":"policy:hot"},"outcome":"accepted","code":"scale","reason":"hot: up","job_id":"1"}`,
		`{"id":0,"time":"2026-11-23T10:24:55.5Z","group":"web","rule":"target","sources":[],"values":{},"current":3,"recommendation":3,"request":null,"outcome":"nothing","code":"missing","reason":"","job_id":""}`,
	} {
		var r Record
		if err := json.Unmarshal([]byte(wire), &r); err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != wire {
			t.Errorf("round trip:\n got %s\nwant %s", got, wire)
		}
	}
	got, err := json.Marshal(Record{Outcome: Nothing})
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"id":0,"time":"0001-01-01T00:00:00Z","group":"","rule":"","sources":[],"values":{},"current":0,"recommendation":0,"request":null,"outcome":"nothing","code":"","reason":"","job_id":""}`
	if string(got) != want {
		t.Errorf("empty record:\n got %s\nwant %s", got, want)
	}
}
