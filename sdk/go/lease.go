package turnstile

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"iter"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"

	pb "turnstile.dev/turnstile-go/pb/turnstile/v1"
)

// maxWait is the longest wait one Hold takes (the server's bound); longer waits ask
// again.
const maxWait = time.Hour

// LeaseOption changes how a lease is taken.
type LeaseOption func(*leaseOptions)

type leaseOptions struct {
	wait    *time.Duration
	owner   string
	permits uint32
}

// WithWait gives up (ErrNotAcquired) when the lease is not won within d. Without
// it a Lock or Semaphore waits as long as its context allows.
func WithWait(d time.Duration) LeaseOption {
	return func(o *leaseOptions) { o.wait = &d }
}

// WithOwner names the holder (default: <host>-<pid>-<random>, the same for the
// process' life).
func WithOwner(owner string) LeaseOption {
	return func(o *leaseOptions) { o.owner = owner }
}

// WithPermits takes n of a semaphore's permits (default 1).
func WithPermits(n uint32) LeaseOption {
	return func(o *leaseOptions) { o.permits = n }
}

var (
	ownerOnce sync.Once
	owner     string
)

// DefaultOwner is <host>-<pid>-<random>: stable for the process' life, unique
// across processes.
func DefaultOwner() string {
	ownerOnce.Do(func() {
		owner = hostPid() + "-" + randomHex(3)
	})
	return owner
}

// hostPid is <host>-<pid> (the host "localhost" when it has no name).
func hostPid() string {
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return fmt.Sprintf("%s-%d", host, os.Getpid())
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func leaseOptionsOf(opts []LeaseOption) leaseOptions {
	o := leaseOptions{permits: 1}
	for _, opt := range opts {
		opt(&o)
	}
	if o.owner == "" {
		o.owner = DefaultOwner()
	}
	return o
}

// holdEvent is one message of a lock's or a semaphore's Hold stream.
type holdEvent struct {
	acquired *pb.HoldResponse_Acquired
	renewed  *pb.HoldResponse_Renewed
	lost     *pb.HoldResponse_Lost
}

// holdKind is what a lease holds: it opens Hold streams and releases by token.
type holdKind struct {
	name, owner string
	ttl         time.Duration
	open        func(ctx context.Context, token string, wait time.Duration) (func() (holdEvent, error), error)
	release     func(ctx context.Context, token string) (bool, error)
}

func (c *Client) lockKind(name string, ttl time.Duration, o leaseOptions) holdKind {
	return holdKind{
		name: name, owner: o.owner, ttl: ttl,
		open: func(ctx context.Context, token string, wait time.Duration) (func() (holdEvent, error), error) {
			stream, err := c.Raw.Locks.Hold(ctx, &pb.HoldRequest{
				Name: name, Owner: o.owner, Ttl: durationOf(ttl), Wait: durationOf(wait), Token: token,
			})
			if err != nil {
				return nil, err
			}
			return holdEvents[pb.HoldResponse](stream), nil
		},
		release: func(ctx context.Context, token string) (bool, error) {
			reply, err := retry(ctx, func(ctx context.Context) (*pb.ReleaseResponse, error) {
				return c.Raw.Locks.Release(ctx, &pb.ReleaseRequest{Name: name, Token: token})
			})
			return reply.GetReleased(), err
		},
	}
}

func (c *Client) semaphoreKind(name string, limit uint32, ttl time.Duration, o leaseOptions) holdKind {
	return holdKind{
		name: name, owner: o.owner, ttl: ttl,
		open: func(ctx context.Context, token string, wait time.Duration) (func() (holdEvent, error), error) {
			stream, err := c.Raw.Semaphores.Hold(ctx, &pb.SemaphoreServiceHoldRequest{
				Name: name, Owner: o.owner, Limit: limit, Permits: o.permits,
				Ttl: durationOf(ttl), Wait: durationOf(wait), Token: token,
			})
			if err != nil {
				return nil, err
			}
			return holdEvents[pb.SemaphoreServiceHoldResponse](stream), nil
		},
		release: func(ctx context.Context, token string) (bool, error) {
			reply, err := retry(ctx, func(ctx context.Context) (*pb.SemaphoreServiceReleaseResponse, error) {
				return c.Raw.Semaphores.Release(ctx, &pb.SemaphoreServiceReleaseRequest{Name: name, Token: token})
			})
			return reply.GetReleased(), err
		},
	}
}

// holdMessage is a lock's or a semaphore's Hold message.
type holdMessage interface {
	GetAcquired() *pb.HoldResponse_Acquired
	GetRenewed() *pb.HoldResponse_Renewed
	GetLost() *pb.HoldResponse_Lost
	GetHeartbeat() *pb.Heartbeat
}

// holdEvents reads a Hold stream's events, heartbeats skipped.
func holdEvents[M any, P interface {
	*M
	holdMessage
}](stream grpc.ServerStreamingClient[M]) func() (holdEvent, error) {
	return func() (holdEvent, error) {
		for {
			received, err := stream.Recv()
			if err != nil {
				return holdEvent{}, err
			}
			if m := P(received); m.GetHeartbeat() == nil {
				return holdEvent{m.GetAcquired(), m.GetRenewed(), m.GetLost()}, nil
			}
		}
	}
}

// Lease is a held lock, semaphore permit or leadership. The server renews it while
// its Hold stream is open; a cut stream is re-opened with the lease's token (on any
// replica) until one answers or the lease's end passes. Context() is cancelled, and
// Lost() closed, only when the lease is really gone; never for a re-attach that kept
// it. Release it when done.
type Lease struct {
	Name         string
	Owner        string
	Token        string
	FencingToken uint64

	kind holdKind
	// ctx is cancelled (with a *LeaseLostError cause) on loss, and on Release.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// lost is closed on loss only.
	lost chan struct{}
	// streams is the parent of every Hold stream of the lease: cancelling it closes
	// the current one.
	streams     context.Context
	stopStreams context.CancelFunc

	mu        sync.Mutex
	expiresAt time.Time
	ends      time.Time
	released  bool
	lostErr   error
}

// Permit is a held share of a semaphore: a Lease.
type Permit = Lease

// Context is cancelled when the lease is lost (context.Cause is the
// *LeaseLostError) or released: run the work the lease guards under it.
func (l *Lease) Context() context.Context { return l.ctx }

// Lost is closed when the lease is lost (never on Release).
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Check returns the *LeaseLostError once the lease is lost, else nil.
func (l *Lease) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// ExpiresAt is the lease's end as the server last told it (it moves on with each
// renewal).
func (l *Lease) ExpiresAt() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiresAt
}

// Release frees the lease (only this holder's); true when this call freed it.
func (l *Lease) Release(ctx context.Context) (bool, error) {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return false, nil
	}
	l.released = true
	lost := l.lostErr != nil
	l.mu.Unlock()
	var freed bool
	var err error
	// Release first, then close the stream: closing it frees the lease too, and a
	// close that won the race would make the Release answer false.
	if !lost {
		freed, err = l.kind.release(ctx, l.Token)
	}
	l.stopStreams()
	l.cancel(context.Canceled)
	if err != nil && !errors.Is(err, ErrUnavailable) {
		return freed, err
	}
	// Closing the stream frees it once the server sees the close.
	return freed, nil
}

func (l *Lease) renewed(expiresAt time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ends := time.Now().Add(l.kind.ttl)
	if !expiresAt.IsZero() {
		l.expiresAt = expiresAt
		if until := time.Now().Add(time.Until(expiresAt)); until.Before(ends) {
			ends = until
		}
	}
	l.ends = ends
}

func (l *Lease) lose(reason string) {
	l.mu.Lock()
	if l.released || l.lostErr != nil {
		l.mu.Unlock()
		return
	}
	err := &LeaseLostError{Name: l.Name, Reason: reason}
	l.lostErr = err
	l.mu.Unlock()
	close(l.lost)
	l.cancel(err)
	l.stopStreams()
}

func (l *Lease) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// keep reads the lease's stream, and re-opens it after a cut, until the lease is
// released or lost.
func (l *Lease) keep(next func() (holdEvent, error)) {
	for next != nil && !l.isReleased() {
		for {
			event, err := next()
			if err != nil {
				if l.isReleased() {
					return
				}
				if final(err) {
					l.lose(fromStatus(err).Error())
					return
				}
				break
			}
			switch {
			case event.acquired != nil:
				l.renewed(timeOf(event.acquired.ExpiresAt))
			case event.renewed != nil:
				l.renewed(timeOf(event.renewed.ExpiresAt))
			case event.lost != nil:
				l.lose(event.lost.Reason)
				return
			}
		}
		next = l.reattach()
	}
}

// reattach opens a new stream holding the same lease, or returns nil (and the lease
// is lost) once its end passed.
func (l *Lease) reattach() func() (holdEvent, error) {
	for attempt := 1; !l.isReleased(); attempt++ {
		l.mu.Lock()
		left := time.Until(l.ends)
		l.mu.Unlock()
		if left <= 0 {
			l.lose("the lease ran out while no replica answered")
			return nil
		}
		next, err := l.kind.open(l.streams, l.Token, 0)
		var event holdEvent
		if err == nil {
			event, err = next()
		}
		switch {
		case err == nil && event.lost != nil:
			l.lose(event.lost.Reason)
			return nil
		case err == nil && event.acquired != nil:
			l.renewed(timeOf(event.acquired.ExpiresAt))
			return next
		case err != nil && final(err):
			l.lose(fromStatus(err).Error())
			return nil
		}
		if sleep(l.streams, min(retryBackoff.Delay(attempt), max(0, left))) != nil {
			return nil
		}
	}
	return nil
}

// acquire opens Hold streams until one acquires (a held Lease), the wait runs out
// (ErrNotAcquired; nil wait: as long as ctx allows), ctx ends, or a final error.
func (c *Client) acquire(ctx context.Context, kind holdKind, wait *time.Duration) (*Lease, error) {
	var end time.Time
	if wait != nil {
		end = time.Now().Add(*wait)
	}
	for attempt := 1; ; attempt++ {
		left := maxWait
		if wait != nil {
			left = max(0, time.Until(end))
		}
		if deadline, ok := ctx.Deadline(); ok {
			left = min(left, max(0, time.Until(deadline)))
		}
		// The stream outlives ctx once acquired: its own context, cut by ctx only
		// while it waits.
		streams, stopStreams := context.WithCancel(context.Background())
		next, err := kind.open(streams, "", left)
		var event holdEvent
		if err == nil {
			waiting := context.AfterFunc(ctx, stopStreams)
			event, err = next()
			if !waiting() && err == nil && event.acquired != nil {
				// ctx ended as it was won: give it back.
				stopStreams()
				return nil, ctx.Err()
			}
		}
		if err == nil && event.acquired != nil {
			lease := &Lease{
				Name: kind.name, Owner: kind.owner,
				Token: event.acquired.Token, FencingToken: event.acquired.FencingToken,
				kind: kind, lost: make(chan struct{}), streams: streams, stopStreams: stopStreams,
			}
			lease.ctx, lease.cancel = context.WithCancelCause(context.Background())
			lease.renewed(timeOf(event.acquired.ExpiresAt))
			go lease.keep(next)
			return lease, nil
		}
		stopStreams()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		expired := wait != nil && !time.Now().Before(end)
		if err != nil {
			if final(err) || expired {
				return nil, fromStatus(err)
			}
		} else if expired {
			return nil, ErrNotAcquired
		}
		// A wait the server ended for a reason other than its own timeout, or a cut
		// stream: ask again after a pause.
		if err != nil || wait == nil || event.lost == nil || event.lost.Reason != "not acquired" {
			pause := retryBackoff.Delay(attempt)
			if wait != nil {
				pause = min(pause, max(0, time.Until(end)))
			}
			if sleep(ctx, pause) != nil {
				return nil, ctx.Err()
			}
		}
	}
}

// Lock takes the lock name for ttl, held (renewed) until Release or the process
// ends; it waits as long as ctx allows, or WithWait's d (then ErrNotAcquired).
func (c *Client) Lock(ctx context.Context, name string, ttl time.Duration, opts ...LeaseOption) (*Lease, error) {
	o := leaseOptionsOf(opts)
	return c.acquire(ctx, c.lockKind(name, ttl, o), o.wait)
}

// TryLock makes one attempt: the Lease, or nil when another holds the lock.
func (c *Client) TryLock(ctx context.Context, name string, ttl time.Duration, opts ...LeaseOption) (*Lease, error) {
	o := leaseOptionsOf(opts)
	zero := time.Duration(0)
	lease, err := c.acquire(ctx, c.lockKind(name, ttl, o), &zero)
	if errors.Is(err, ErrNotAcquired) {
		return nil, nil
	}
	return lease, err
}

// Campaign waits, as long as ctx allows, to lead name as owner: the Lease is the
// leadership (its Context ends when leadership is lost).
func (c *Client) Campaign(ctx context.Context, name, owner string, ttl time.Duration) (*Lease, error) {
	return c.Lock(ctx, name, ttl, WithOwner(owner))
}

// Semaphore takes permits (WithPermits, default 1) of the semaphore name whose
// limit is limit, first come first served; held and waited for as Lock is.
func (c *Client) Semaphore(ctx context.Context, name string, limit uint32, ttl time.Duration, opts ...LeaseOption) (*Permit, error) {
	o := leaseOptionsOf(opts)
	return c.acquire(ctx, c.semaphoreKind(name, limit, ttl, o), o.wait)
}

// CheckFence reports whether fencingToken is the lock's current one.
func (c *Client) CheckFence(ctx context.Context, name string, fencingToken uint64) (bool, error) {
	reply, err := retry(ctx, func(ctx context.Context) (*pb.CheckFenceResponse, error) {
		return c.Raw.Locks.CheckFence(ctx, &pb.CheckFenceRequest{Name: name, FencingToken: fencingToken})
	})
	return reply.GetCurrent(), err
}

// LockState is a lock as Watch sees it.
type LockState struct {
	Held         bool
	Owner        string
	FencingToken uint64
	ExpiresAt    time.Time
}

// Watch yields the lock's state now, then each change, until ctx ends or the loop
// stops; a stream cut by UNAVAILABLE is opened again, and a state older than one
// already seen (a lower fencing token) is skipped. A final error is yielded once.
func (c *Client) Watch(ctx context.Context, name string) iter.Seq2[LockState, error] {
	return func(yield func(LockState, error) bool) {
		var newest uint64
		for attempt := 1; ctx.Err() == nil; attempt++ {
			stream, err := c.Raw.Locks.Watch(ctx, &pb.WatchRequest{Name: name})
			for err == nil {
				var m *pb.WatchResponse
				if m, err = stream.Recv(); err != nil {
					break
				}
				attempt = 1
				var state LockState
				switch {
				case m.GetHeld() != nil:
					held := m.GetHeld()
					state = LockState{Held: true, Owner: held.Owner, FencingToken: held.FencingToken, ExpiresAt: timeOf(held.ExpiresAt)}
				case m.GetFree() != nil:
					state = LockState{FencingToken: m.GetFree().FencingToken}
				default:
					continue
				}
				if state.FencingToken < newest {
					continue
				}
				newest = state.FencingToken
				if !yield(state, nil) {
					return
				}
			}
			if ctx.Err() != nil {
				return
			}
			if final(err) {
				yield(LockState{}, fromStatus(err))
				return
			}
			if errors.Is(err, io.EOF) {
				attempt = 1
			}
			if sleep(ctx, retryBackoff.Delay(attempt)) != nil {
				return
			}
		}
	}
}
