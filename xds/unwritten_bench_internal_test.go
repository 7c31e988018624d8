package xds

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// BenchmarkUnwrittenWait is what a response waiting its turn under the
// unwritten budget costs: 500 streams each take a 32 KiB response's bytes
// and give them back, against a budget of four such responses, so nearly
// every response waits. waits/op is the share of responses that waited.
func BenchmarkUnwrittenWait(b *testing.B) {
	const streams, size = 500, 32 << 10
	m := newGuardMetrics()
	budget := newUnwrittenBudget(4*size, unwrittenWait, m)
	ctx := context.Background()
	var taken atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	for range streams {
		wg.Go(func() {
			for taken.Add(1) <= int64(b.N) {
				c, err := budget.take(ctx, size)
				if err != nil {
					b.Error(err)
					return
				}
				runtime.Gosched() // the writer copies the response out
				c.give()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	waited := testutil.ToFloat64(m.responsesWaited.WithLabelValues("room")) + testutil.ToFloat64(m.responsesWaited.WithLabelValues("expired"))
	b.ReportMetric(waited/float64(b.N), "waits/op")
}
