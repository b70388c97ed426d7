// Command autoscalerclient stands in for sacloud/autoscaler's
// `autoscaler inputs direct up|down` in tests of the seed's cron script: the
// same arguments, the same gRPC calls, the same one-line answer.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/shoal-lb/shoal/internal/compat/sacloud/autoscalerpb"
)

func main() {
	if len(os.Args) < 4 || os.Args[1] != "inputs" || os.Args[2] != "direct" || (os.Args[3] != "up" && os.Args[3] != "down") {
		fmt.Fprintln(os.Stderr, "usage: autoscaler inputs direct up|down --dest unix:PATH --resource-name NAME [--desired-state-name PLAN]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("direct", flag.ExitOnError)
	dest := fs.String("dest", "", "core address")
	resource := fs.String("resource-name", "default", "resource")
	desired := fs.String("desired-state-name", "", "plan")
	source := fs.String("source", "default", "source")
	_ = fs.Parse(os.Args[4:])
	if !strings.HasPrefix(*dest, "unix:") {
		fmt.Fprintln(os.Stderr, "--dest must be unix:PATH")
		os.Exit(2)
	}
	conn, err := grpc.NewClient(*dest, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer conn.Close()
	c := pb.NewScalingServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	call := c.Up
	if os.Args[3] == "down" {
		call = c.Down
	}
	resp, err := call(ctx, &pb.ScalingRequest{Source: *source, ResourceName: *resource, DesiredStateName: *desired})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	line := fmt.Sprintf("status: %s, job-id: %s", resp.GetStatus(), resp.GetScalingJobId())
	if m := resp.GetMessage(); m != "" {
		line += ", message: " + m
	}
	fmt.Println(line)
}
