package core

// healthField names the health check field a rendered http-check or
// tcp-check line came from (see haproxy.checkLines).
func healthField(words []string) string {
	if len(words) < 3 {
		return "type"
	}
	switch words[0] + " " + words[1] + " " + words[2] {
	case "http-check expect status":
		return "status"
	case "http-check expect string":
		return "body"
	case "http-check expect rstring":
		return "body_regex"
	case "tcp-check expect binary":
		return "expect"
	}
	switch words[0] + " " + words[1] {
	case "http-check send":
		return "path"
	case "tcp-check send-binary":
		return "send"
	}
	return "type"
}
