package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/shoal-lb/shoal/internal/store"
)

// Cordoned hosts are keys cordoned/<provider>/<host>, store.CordonedHost:
// a cordon survives a failover because it is the pair's state.

func (s *Store) cordonKey(provider, host string) string {
	return s.prefix + "cordoned/" + provider + "/" + host
}

// CordonHost records h as cordoned; cordoning a cordoned host keeps its
// first Since and reports false.
func (s *Store) CordonHost(ctx context.Context, h store.CordonedHost) (added bool, err error) {
	b, err := json.Marshal(h)
	if err != nil {
		return false, err
	}
	key := s.cordonKey(h.Provider, h.Host)
	added, err = s.commit(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0)}, clientv3.OpPut(key, string(b)))
	if err != nil {
		return false, fmt.Errorf("cordon host %s/%s: %w", h.Provider, h.Host, err)
	}
	return added, nil
}

// UncordonHost forgets the host's cordon; removed is false when it had none.
func (s *Store) UncordonHost(ctx context.Context, provider, host string) (removed bool, err error) {
	key := s.cordonKey(provider, host)
	removed, err = s.commit(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), ">", 0)}, clientv3.OpDelete(key))
	if err != nil {
		return false, fmt.Errorf("uncordon host %s/%s: %w", provider, host, err)
	}
	return removed, nil
}

// SetHostDraining records that a drain of the cordoned host runs (or no
// longer does); found is false when the host is not cordoned.
func (s *Store) SetHostDraining(ctx context.Context, provider, host string, draining bool) (found bool, err error) {
	key := s.cordonKey(provider, host)
	for range 5 {
		resp, err := s.read(ctx, key)
		if err != nil {
			return false, fmt.Errorf("mark host %s/%s draining: %w", provider, host, err)
		}
		if len(resp.Kvs) == 0 {
			return false, nil
		}
		var h store.CordonedHost
		if err := json.Unmarshal(resp.Kvs[0].Value, &h); err != nil {
			return false, fmt.Errorf("mark host %s/%s draining: decode: %w", provider, host, err)
		}
		h.Draining = draining
		b, err := json.Marshal(h)
		if err != nil {
			return false, err
		}
		// Written only over the record read: an uncordon in between wins.
		ok, err := s.commit(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)}, clientv3.OpPut(key, string(b)))
		if err != nil {
			return false, fmt.Errorf("mark host %s/%s draining: %w", provider, host, err)
		}
		if ok {
			return true, nil
		}
	}
	return false, fmt.Errorf("mark host %s/%s draining: its record kept changing", provider, host)
}

// CordonedHosts lists the cordoned hosts by provider, then host.
func (s *Store) CordonedHosts(ctx context.Context) ([]store.CordonedHost, error) {
	resp, err := s.read(ctx, s.prefix+"cordoned/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("list cordoned hosts: %w", err)
	}
	var out []store.CordonedHost
	for _, kv := range resp.Kvs {
		var h store.CordonedHost
		if err := json.Unmarshal(kv.Value, &h); err != nil {
			return nil, fmt.Errorf("list cordoned hosts: decode %s: %w", kv.Key, err)
		}
		out = append(out, h)
	}
	return out, nil
}
