// Command shoal is a self-hosted autoscaling load balancer. See README.md.
package main

import (
	"os"

	"github.com/shoal-lb/shoal/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
