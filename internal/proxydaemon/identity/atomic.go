package identity

import (
	"sync/atomic"
	"time"
)

type atomicTime struct{ n atomic.Int64 }

func (a *atomicTime) Store(t time.Time) { a.n.Store(t.UnixNano()) }
func (a *atomicTime) Load() time.Time   { return time.Unix(0, a.n.Load()).UTC() }

type atomicBool = atomic.Bool
