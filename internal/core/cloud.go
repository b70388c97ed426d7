package core

import (
	"fmt"
	"log/slog"

	"github.com/shoal-lb/shoal/internal/config"
	"github.com/shoal-lb/shoal/internal/provider/cloud"
	cloudexec "github.com/shoal-lb/shoal/internal/provider/cloud/exec"
	"github.com/shoal-lb/shoal/internal/provider/cloud/sacloud"
	sshprov "github.com/shoal-lb/shoal/internal/provider/ssh"
)

// newCloud builds the provider of a cloud entry over its type's driver.
// Servers carry the owner tag of this state directory, the same marker
// the ssh provider's processes carry.
func newCloud(pc config.Provider, stateDir string, log *slog.Logger) (*cloud.Provider, error) {
	var (
		d   cloud.Driver
		err error
	)
	switch pc.Type {
	case config.ProviderExec:
		d, err = cloudexec.New(*pc.Exec, pc.Cloud.Port)
	case config.ProviderSacloud:
		d, err = sacloud.New(*pc.Sacloud, log)
	default:
		return nil, fmt.Errorf("type %q has no cloud driver", pc.Type)
	}
	if err != nil {
		return nil, err
	}
	return cloud.New(pc.Name, d, *pc.Cloud, cloud.Options{Owner: sshprov.OwnerID(stateDir), Driver: pc.Type, StateDir: stateDir, Log: log})
}
