package exec_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-lb/shoal/internal/provider/cloud"
	"github.com/shoal-lb/shoal/internal/provider/cloud/exec"
)

// cliScript is a CLI written by the test: every run says on stderr which
// command it is and why it fails (after 4 KB of chatter, so that only the
// end of stderr can be quoted), then behaves as its mode says.
const cliScript = `#!/bin/sh
cmd=$1 mode=$2
i=0
while [ $i -lt 64 ]; do
	echo "chatter line $i of a CLI that talks too much before it says what went wrong" >&2
	i=$((i + 1))
done
echo "cli-says: $cmd cannot go on ($mode)" >&2
case $mode in
exit) exit 3 ;;
timeout) exec sleep 60 ;;
huge) head -c 2000000 /dev/zero | tr '\0' 'x' ;;
garbage) echo "<html>502 Bad Gateway</html>" ;;
empty) ;;
twovalues) echo '{"id": "i-1", "address": "10.0.0.5"} {"id": "i-2"}' ;;
array) echo '[{"id": "i-1", "address": "10.0.0.5"}]' ;;
object) echo '{"id": "i-1", "address": "10.0.0.5"}' ;;
noid) [ "$cmd" = start ] && echo '{"address": "10.0.0.5"}' || echo '[{"address": "10.0.0.5", "tags": {"shoal-owner": "o"}}]' ;;
noaddr) echo '{"id": "i-1"}' ;;
badport) [ "$cmd" = start ] && echo '{"id": "i-1", "address": "10.0.0.5:99999"}' || echo '[{"id": "i-1", "address": "10.0.0.5:99999", "tags": {"shoal-owner": "o"}}]' ;;
noport) [ "$cmd" = start ] && echo '{"id": "i-1", "address": "10.0.0.5"}' || echo '[{"id": "i-1", "address": "10.0.0.5", "tags": {"shoal-owner": "o"}}]' ;;
esac
`

// TestFailuresQuoteStderr: every way each command (start, stop, list) can
// fail — a non-zero exit, a timeout, too much output, garbage, nothing,
// JSON of the wrong shape — fails with the end of the command's stderr in
// the reason, bounded.
func TestFailuresQuoteStderr(t *testing.T) {
	t.Parallel()
	script := filepath.Join(t.TempDir(), "cli")
	if err := os.WriteFile(script, []byte(cliScript), 0o755); err != nil {
		t.Fatal(err)
	}
	type call func(d *exec.Driver) error
	start := func(d *exec.Driver) error {
		_, err := d.Create(context.Background(), cloud.CreateRequest{Name: "web-001", Group: "web", Index: 1, Tags: map[string]string{cloud.TagOwner: "o"}})
		return err
	}
	stop := func(d *exec.Driver) error { return d.Delete(context.Background(), "i-1") }
	list := func(d *exec.Driver) error { _, err := d.List(context.Background(), "o"); return err }
	for _, tc := range []struct {
		cmd, mode string
		port      int // the provider's; 0: none
		do        call
		want      string
	}{
		{"start", "exit", 8080, start, "exit status 3"},
		{"start", "timeout", 8080, start, "timed out after 1s; killed"},
		{"start", "huge", 8080, start, "printed more than 1048576 bytes"},
		{"start", "garbage", 8080, start, "not JSON"},
		{"start", "empty", 8080, start, "no output"},
		{"start", "twovalues", 8080, start, "more than one JSON value"},
		{"start", "array", 8080, start, "not JSON: json: cannot unmarshal array"},
		{"start", "noid", 8080, start, `no "id"`},
		{"start", "noaddr", 8080, start, "no address in its answer"},
		{"start", "badport", 8080, start, "port must be from 1 to 65535"},
		{"start", "noport", 0, start, "has no port, and the provider sets none"},
		{"stop", "exit", 8080, stop, "exit status 3"},
		{"stop", "timeout", 8080, stop, "timed out after 1s; killed"},
		{"stop", "huge", 8080, stop, "printed more than 1048576 bytes"},
		{"list", "exit", 8080, list, "exit status 3"},
		{"list", "timeout", 8080, list, "timed out after 1s; killed"},
		{"list", "huge", 8080, list, "printed more than 1048576 bytes"},
		{"list", "garbage", 8080, list, "not JSON"},
		{"list", "empty", 8080, list, "no output"},
		{"list", "object", 8080, list, "want a JSON array of servers"},
		{"list", "noid", 8080, list, `server [0]: no "id"`},
		{"list", "badport", 8080, list, "port must be from 1 to 65535"},
		{"list", "noport", 0, list, "has no port, and the provider sets none"},
	} {
		t.Run(tc.cmd+"/"+tc.mode, func(t *testing.T) {
			t.Parallel()
			cfg := exec.Config{
				Start: []string{script, "start", "ok"}, Stop: []string{script, "stop", "ok"}, List: []string{script, "list", "ok"},
				Timeout: time.Minute, // a bound, not a speed: the machine may be busy
			}
			if tc.mode == "timeout" {
				cfg.Timeout = time.Second
			}
			argv := map[string]*[]string{"start": &cfg.Start, "stop": &cfg.Stop, "list": &cfg.List}[tc.cmd]
			*argv = []string{script, tc.cmd, tc.mode}
			d, err := exec.New(cfg, tc.port)
			if err != nil {
				t.Fatal(err)
			}
			err = tc.do(d)
			if err == nil {
				t.Fatal("succeeded")
			}
			msg := err.Error()
			said := "stderr: "
			if i := strings.Index(msg, said); i < 0 || !strings.HasSuffix(msg, "cli-says: "+tc.cmd+" cannot go on ("+tc.mode+")") {
				t.Errorf("reason lacks the end of the command's stderr:\n%s", msg)
			}
			if !strings.Contains(msg, tc.want) {
				t.Errorf("reason lacks %q:\n%s", tc.want, msg)
			}
			if len(msg) > 3<<10 {
				t.Errorf("reason is %d bytes, want the stderr quoted bounded", len(msg))
			}
		})
	}
}
