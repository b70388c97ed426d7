package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/shoal-lb/shoal/internal/haproxy/hapword"
)

// Values of Group.HashOn; HashOnHeader is a prefix, followed by the header's
// name.
const (
	HashOnURI    = "uri"
	HashOnSource = "source"
	HashOnHeader = "header:"
)

// Values of Group.Proto.
const (
	ProtoH1 = "h1"
	ProtoH2 = "h2"
)

// balance decodes how a group spreads requests over its instances: balance,
// hash_on, sticky and proto.
func (d *decoder) balance(f *fields, g *Group) {
	def := defaultGroup
	balance, bn := f.str("balance", def.Balance)
	if bn != nil && !slices.Contains(balanceAlgorithms, balance) {
		d.errorf(bn, f.field("balance"), "must be one of %s (HAProxy can add servers at runtime only with a dynamic algorithm), got %q",
			strings.Join(balanceAlgorithms, ", "), balance)
	}
	g.Balance = balance

	g.HashOn = def.HashOn
	if on, n := f.str("hash_on", def.HashOn); n != nil {
		switch {
		case balance != BalanceHash:
			d.errorf(n, f.field("hash_on"), "applies only to balance: %s, and balance is %q", BalanceHash, balance)
		case CheckHashOn(on) != nil:
			d.errorf(n, f.field("hash_on"), "%v", CheckHashOn(on))
		default:
			g.HashOn = on
		}
	}

	if n := f.get("sticky"); n != nil {
		s := section[Sticky](d, n, f.field("sticky"))
		if s.node != nil {
			st := defaultSticky
			if c, cn := s.str("cookie", ""); cn != nil {
				if err := hapword.HTTPToken(c); err != nil {
					d.errorf(cn, s.field("cookie"), "cookie name %v", err)
				} else {
					st.Cookie = c
					g.Sticky = &st
				}
			}
		}
	}

	proto, pn := f.str("proto", def.Proto)
	if pn != nil && proto != ProtoH1 && proto != ProtoH2 {
		d.errorf(pn, f.field("proto"), "must be %s (HTTP/1.1 to the instances) or %s (HTTP/2 without TLS, h2c), got %q", ProtoH1, ProtoH2, proto)
		proto = def.Proto
	}
	g.Proto = proto
}

// CheckHashOn accepts what a group with balance: hash may hash: "uri",
// "source" or "header:NAME".
func CheckHashOn(on string) error {
	if on == HashOnURI || on == HashOnSource {
		return nil
	}
	name, ok := strings.CutPrefix(on, HashOnHeader)
	if !ok {
		return fmt.Errorf("must be %s, %s or %sNAME (a request header), got %q", HashOnURI, HashOnSource, HashOnHeader, on)
	}
	if err := hapword.HTTPToken(name); err != nil {
		return fmt.Errorf("header in %q: %w", on, err)
	}
	return nil
}
