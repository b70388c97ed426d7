package core

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
	"github.com/shoal-lb/shoal/internal/provider/cloud/ec2"
	cloudexec "github.com/shoal-lb/shoal/internal/provider/cloud/exec"
	"github.com/shoal-lb/shoal/internal/provider/cloud/sacloud"
)

// newCloud builds the provider of a cloud entry over its type's driver.
// Servers carry the owner tag, the same marker the ssh provider's
// processes carry (see ownerID); guard fences the poller's sweep.
func newCloud(pc config.Provider, stateDir, owner string, guard func(context.Context) error, log *slog.Logger) (*cloud.Provider, error) {
	var (
		d   cloud.Driver
		err error
	)
	switch pc.Type {
	case config.ProviderExec:
		d, err = cloudexec.New(*pc.Exec, pc.Cloud.Port)
	case config.ProviderEC2:
		// New calls no API; the context reads the credentials file only.
		d, err = ec2.New(context.Background(), *pc.EC2)
	case config.ProviderSacloud:
		d, err = sacloud.New(*pc.Sacloud, log)
	default:
		return nil, fmt.Errorf("type %q has no cloud driver", pc.Type)
	}
	if err != nil {
		return nil, err
	}
	return cloud.New(pc.Name, d, *pc.Cloud, cloud.Options{Owner: owner, Driver: pc.Type, StateDir: stateDir, Log: log, Guard: guard})
}

// descCloudCalls is the API calls of each cloud provider, by kind: what a
// scale event costs (one listing per interval, never one per server).
var descCloudCalls = prometheus.NewDesc("shoal_cloud_api_calls_total",
	"API calls a cloud provider made, by kind (create, delete, list).", []string{"provider", "call"}, nil)

// cloudCalls exposes every cloud provider's API call counts.
type cloudCalls struct{ p *providers }

func (c cloudCalls) Describe(ch chan<- *prometheus.Desc) { ch <- descCloudCalls }

func (c cloudCalls) Collect(ch chan<- prometheus.Metric) {
	c.p.mu.RLock()
	defer c.p.mu.RUnlock()
	for name, cp := range c.p.cloud {
		n := cp.Calls()
		for _, kv := range []struct {
			call string
			v    int64
		}{{"create", n.Create}, {"delete", n.Delete}, {"list", n.List}} {
			ch <- prometheus.MustNewConstMetric(descCloudCalls, prometheus.CounterValue, float64(kv.v), name, kv.call)
		}
	}
}
