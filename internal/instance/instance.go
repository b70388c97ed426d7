// Package instance is the one shape of an instance's identity: the record a
// provider returns when it starts or adopts an instance, that the store
// persists and that shoal reads its address from. It sits below the store so
// that the store can persist it, as packages decision and job do.
package instance

import (
	"encoding/json"
	"time"
)

// Record is the provider-neutral, persistable identity of an instance:
// enough to adopt it after a restart of shoal and to prove it is still the
// same instance. What proves that is the provider's business: Data is opaque
// to everyone else.
type Record struct {
	Group string
	Name  string
	Index int
	// ID is the provider's opaque identifier of the instance.
	ID string
	// Addr is where the instance serves, host:port ("" before it has one);
	// HAProxy connects there.
	Addr string
	// Host is the machine the instance runs on, as its provider names it.
	Host string
	// Provider is the name of the config entry whose provider started it
	// (a group may span several); "" in a record of an older shoal, whose
	// groups had one.
	Provider string `json:",omitempty"`
	// Data is what the provider alone interprets (JSON), e.g. the local
	// provider's pid, pid start time and marker.
	Data      json.RawMessage
	StartedAt time.Time
}
