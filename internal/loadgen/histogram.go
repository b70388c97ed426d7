package loadgen

import (
	"math/bits"
	"time"
)

// histogram counts durations in log-linear buckets, as HDR histograms do: values
// below 2^subBits ns get a bucket each, and every further power of two is split
// into 2^(subBits-1) equal buckets. A bucket is thus at most 1/64 of its values
// wide (under 1.6% error) while the whole range of time.Duration takes 3,712
// counters, about 29 KiB.
type histogram struct {
	counts [numBuckets]int64
	total  int64
	max    time.Duration
}

const (
	subBits  = 7
	subCount = 1 << subBits
	half     = subCount / 2
	// numBuckets covers every non-negative int64: 63 significant bits at most.
	numBuckets = subCount + (63-subBits)*half
)

// bucketOf returns the index of the bucket that holds v.
func bucketOf(v uint64) int {
	shift := bits.Len64(v) - subBits
	if shift <= 0 {
		return int(v)
	}
	// v>>shift keeps the top subBits bits, in [half, subCount).
	return subCount + (shift-1)*half + int(v>>shift) - half
}

// bucketRange returns the smallest and largest value that fall in bucket i.
func bucketRange(i int) (lo, hi uint64) {
	if i < subCount {
		return uint64(i), uint64(i)
	}
	shift := (i-subCount)/half + 1
	top := uint64((i-subCount)%half + half)
	return top << shift, (top+1)<<shift - 1
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.total++
	h.max = max(h.max, d)
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = max(h.max, o.max)
}

// quantile returns the middle of the bucket holding the q-th quantile (0 < q <= 1),
// never more than the largest value recorded.
func (h *histogram) quantile(q float64) time.Duration {
	if h.total == 0 {
		return 0
	}
	// The rank of the q-th quantile, 1-based: ceil(q*total) without float rounding surprises.
	rank := int64(q * float64(h.total))
	if float64(rank) < q*float64(h.total) {
		rank++
	}
	rank = max(rank, 1)
	var seen int64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			lo, hi := bucketRange(i)
			return min(time.Duration(lo+(hi-lo)/2), h.max)
		}
	}
	return h.max
}
