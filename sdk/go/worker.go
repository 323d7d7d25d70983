package turnstile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	pb "turnstile.dev/turnstile-go/pb/turnstile/v1"
)

// AckBatch is the most receipts one Ack carries.
const AckBatch = 64

// MaxResultBytes is the most a handler's result may hold (the server refuses more).
const MaxResultBytes = 64 * 1024

// Handler runs one task. Returning nil acks it (with the result SetResult gave);
// RetryAfter(d) gives it back due in d; Fail(reason) gives up (the task goes DEAD);
// any other error gives it back after the worker's backoff. ctx is cancelled when
// the task's lease is lost, the server cancels the task, or the drain runs out of
// time.
type Handler func(ctx context.Context, t *Task) error

// RetryError asks for the task again after Delay.
type RetryError struct {
	Delay time.Duration
}

func (e *RetryError) Error() string { return fmt.Sprintf("retry in %s", e.Delay) }

// RetryAfter is a handler's error that gives the task back, due again in d.
func RetryAfter(d time.Duration) error { return &RetryError{Delay: d} }

// FailError gives up on the task: it goes DEAD now, with Reason as its last error.
type FailError struct {
	Reason string
}

func (e *FailError) Error() string { return e.Reason }

// Fail is a handler's error that gives up on the task (no more attempts).
func Fail(reason string) error { return &FailError{Reason: reason} }

// Hooks are called (on the handler's goroutine) for the user's metrics and logs.
type Hooks struct {
	OnStart   func(t *Task)
	OnSuccess func(t *Task)
	OnFailure func(t *Task, err error)
	OnRetry   func(t *Task, delay time.Duration)
	OnDead    func(t *Task, err error)
}

// WorkerOptions configure a Worker; zero values take the defaults.
type WorkerOptions struct {
	// Concurrency is how many handlers run at once (default 1).
	Concurrency int
	// Visibility is each delivery's lease (default 30 s), extended at two thirds
	// for as long as its handler runs.
	Visibility time.Duration
	// WorkerID names the worker (default <host>-<pid>-<random>): a cut stream
	// re-attaches by it and keeps its deliveries.
	WorkerID string
	// Backoff is the delay before a failed task's next attempt (default
	// DefaultBackoff).
	Backoff *Backoff
	// DrainTimeout bounds how long running handlers may finish once Run's context
	// ends (default 30 s).
	DrainTimeout time.Duration
	Hooks        Hooks
	// Logger receives the worker's logs (default slog.Default()).
	Logger *slog.Logger
}

// Worker runs a handler on a queue's tasks through one Subscribe stream.
type Worker struct {
	// Queue and WorkerID are the worker's queue and name.
	Queue    string
	WorkerID string

	c            *Client
	handler      Handler
	concurrency  int
	visibility   time.Duration
	backoff      Backoff
	drainTimeout time.Duration
	hooks        Hooks
	log          *slog.Logger
	acks         *acker

	// stop ends Run's context (Stop).
	stopOnce sync.Once
	stop     chan struct{}

	mu        sync.Mutex
	running   map[string]*run
	cut       map[string]bool
	unstarted []string
	heldNacks []nack
	draining  bool
	handlers  sync.WaitGroup
}

// run is one handler at work.
type run struct {
	task *Task
	// cancel ends the handler's context.
	cancel context.CancelCauseFunc
	// lost: its end is not the handler's to report (its lease is gone, or the server
	// cancelled it and its end was reported then).
	lost bool
}

type nack struct {
	receipt string
	delay   time.Duration
	error   string
	giveUp  bool
}

// Worker makes a worker of handler on queue; Run starts it.
func (c *Client) Worker(queue string, handler Handler, opts WorkerOptions) *Worker {
	w := &Worker{
		Queue: queue, WorkerID: opts.WorkerID, c: c, handler: handler,
		concurrency: max(1, opts.Concurrency), visibility: opts.Visibility,
		backoff: DefaultBackoff, drainTimeout: opts.DrainTimeout, hooks: opts.Hooks,
		log: opts.Logger, stop: make(chan struct{}),
		running: map[string]*run{}, cut: map[string]bool{},
	}
	if w.WorkerID == "" {
		w.WorkerID = hostPid() + "-" + randomHex(3)
	}
	if w.visibility <= 0 {
		w.visibility = 30 * time.Second
	}
	if w.drainTimeout <= 0 {
		w.drainTimeout = 30 * time.Second
	}
	if opts.Backoff != nil {
		w.backoff = *opts.Backoff
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	w.acks = newAcker(c, queue, w.log)
	return w
}

// Stop asks Run to drain and return.
func (w *Worker) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
}

// Run works the queue until ctx ends or Stop, then drains: takes nothing new, lets
// running handlers finish within the drain timeout, sends their acks, closes the
// stream and gives back what did not finish. Nothing a handler finished is lost;
// nothing it did not finish is acked. It returns nil after a drain, or the typed
// error of a stream the server refused (a bad queue name, a wrong token).
func (w *Worker) Run(ctx context.Context) error {
	streams, closeStreams := context.WithCancel(context.Background())
	defer closeStreams()
	refused := make(chan error, 1)
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		if err := w.consume(streams); err != nil {
			refused <- err
		}
	}()
	var err error
	select {
	case <-ctx.Done():
	case <-w.stop:
	case err = <-refused:
	}
	w.drain(closeStreams, consumed)
	return err
}

func (w *Worker) consume(streams context.Context) error {
	request := &pb.SubscribeRequest{
		Queue: w.Queue, MaxInFlight: uint32(w.concurrency), Visibility: durationOf(w.visibility),
		WorkerId: w.WorkerID,
	}
	for attempt := 1; ; attempt++ {
		stream, err := w.c.Raw.Queues.Subscribe(streams, request)
		for err == nil {
			var m *pb.SubscribeResponse
			if m, err = stream.Recv(); err != nil {
				break
			}
			attempt = 1
			switch {
			case m.GetTask() != nil:
				w.deliver(m.GetTask())
			case m.GetCancelled() != nil:
				w.stopTask(m.GetCancelled().Receipt)
			}
		}
		if streams.Err() != nil {
			return nil
		}
		if final(err) {
			return fromStatus(err)
		}
		w.log.Warn("turnstile: the worker's stream was cut; opening it again", "queue", w.Queue, "cause", err)
		if sleep(streams, retryBackoff.Delay(attempt)) != nil {
			return nil
		}
	}
}

func (w *Worker) deliver(wire *pb.Task) {
	w.mu.Lock()
	defer w.mu.Unlock()
	receipt := wire.Receipt
	// A re-attached stream sends its kept deliveries again.
	if w.running[receipt] != nil || w.cut[receipt] || w.acks.has(receipt) {
		return
	}
	if w.draining {
		w.unstarted = append(w.unstarted, receipt)
		return
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	r := &run{task: taskOf(wire, w.Queue), cancel: cancel}
	w.running[receipt] = r
	w.handlers.Add(1)
	go w.handle(ctx, r)
}

// stopTask: the server cancelled a task this worker runs. Its context ends and its
// delivery is ended now (a Nack, which the server turns into the task's end as
// cancelled); what the handler does after is not reported.
func (w *Worker) stopTask(receipt string) {
	w.mu.Lock()
	r := w.running[receipt]
	if r == nil || r.lost {
		w.mu.Unlock()
		return
	}
	r.lost = true
	r.cancel(errors.New("the task was cancelled while it ran"))
	n := nack{receipt: receipt, error: "cancelled while it ran"}
	if w.draining {
		w.heldNacks = append(w.heldNacks, n)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	go w.nack(n)
}

func (w *Worker) handle(ctx context.Context, r *run) {
	defer w.handlers.Done()
	task := r.task
	stopExtending := w.extend(r)
	defer func() {
		stopExtending()
		w.mu.Lock()
		delete(w.running, task.Receipt)
		w.mu.Unlock()
	}()
	hook(func() { w.hooks.OnStart(task) }, w.hooks.OnStart != nil)
	err := w.call(ctx, task)
	result := task.takeResult()
	if err == nil && len(result) > MaxResultBytes {
		err = Fail(fmt.Sprintf("its result is %d bytes, over the limit of %d", len(result), MaxResultBytes))
	}
	w.mu.Lock()
	gone := r.lost || w.cut[task.Receipt]
	w.mu.Unlock()
	if gone {
		return
	}
	if err == nil {
		w.acks.add(task.Receipt, result)
		hook(func() { w.hooks.OnSuccess(task) }, w.hooks.OnSuccess != nil)
		return
	}
	n := nack{receipt: task.Receipt, delay: w.backoff.Delay(int(task.Attempt)), error: trimError(err.Error())}
	var retryErr *RetryError
	var failErr *FailError
	if errors.As(err, &retryErr) {
		n.delay = retryErr.Delay
		hook(func() { w.hooks.OnRetry(task, n.delay) }, w.hooks.OnRetry != nil)
	}
	n.giveUp = errors.As(err, &failErr)
	hook(func() { w.hooks.OnFailure(task, err) }, w.hooks.OnFailure != nil)
	w.log.Debug("turnstile: a handler failed", "queue", w.Queue, "task", task.ID, "cause", err)
	w.mu.Lock()
	if w.draining {
		w.heldNacks = append(w.heldNacks, n)
		w.mu.Unlock()
		return
	}
	w.mu.Unlock()
	if w.nack(n) {
		hook(func() { w.hooks.OnDead(task, err) }, w.hooks.OnDead != nil)
	}
}

// call runs the handler; a panic is its error, with the stack.
func (w *Worker) call(ctx context.Context, task *Task) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return w.handler(ctx, task)
}

// hook calls a user's hook; one that panics does not stop the worker.
func hook(call func(), set bool) {
	if !set {
		return
	}
	defer func() { _ = recover() }()
	call()
}

// nack gives a delivery back; whether the task went DEAD. A Nack that fails leaves
// the delivery to come back when its lease ends.
func (w *Worker) nack(n nack) bool {
	reply, err := retry(context.Background(), func(ctx context.Context) (*pb.NackResponse, error) {
		return w.c.Raw.Queues.Nack(ctx, &pb.NackRequest{
			Queue: w.Queue, Receipt: n.receipt, Delay: durationOf(n.delay), Error: n.error, GiveUp: n.giveUp,
		})
	})
	if err != nil {
		w.log.Debug("turnstile: a nack failed; the delivery comes back at its lease end", "queue", w.Queue, "cause", err)
		return false
	}
	return reply.Dead
}

// extend extends the delivery's lease at two thirds of visibility, again and again,
// carrying the handler's progress; a stale receipt ends the handler's context, a
// cancelled task stops it. It returns the function that stops the extending.
func (w *Worker) extend(r *run) func() {
	every := w.visibility * 2 / 3
	var mu sync.Mutex
	stopped := false
	var timer *time.Timer
	var turn func()
	turn = func() {
		request := &pb.ExtendLeaseRequest{
			Queue: w.Queue, Receipt: r.task.Receipt, Visibility: durationOf(w.visibility),
			Progress: r.task.takeProgress(),
		}
		ctx, cancel := context.WithTimeout(context.Background(), w.visibility/3)
		reply, err := retry(ctx, func(ctx context.Context) (*pb.ExtendLeaseResponse, error) {
			return w.c.Raw.Queues.ExtendLease(ctx, request)
		})
		cancel()
		mu.Lock()
		defer mu.Unlock()
		if stopped {
			return
		}
		switch {
		case err == nil && reply.Cancelled:
			go w.stopTask(r.task.Receipt)
			return
		case err == nil && !reply.Extended:
			w.mu.Lock()
			r.lost = true
			w.mu.Unlock()
			r.cancel(&LeaseLostError{Name: r.task.ID, Reason: "the task's lease was lost"})
			return
		}
		// A failed extension is tried again at the next turn: the lease lasts a
		// third of visibility more.
		timer = time.AfterFunc(every, turn)
	}
	mu.Lock()
	timer = time.AfterFunc(every, turn)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		timer.Stop()
	}
}

func (w *Worker) drain(closeStreams context.CancelFunc, consumed <-chan struct{}) {
	w.mu.Lock()
	w.draining = true
	w.mu.Unlock()
	// Acks wait for the stream's close: each would free a slot the server fills with
	// a delivery the draining worker must give back (an attempt spent for nothing).
	// Receipts stay valid after the close (the deliveries stay leased to the worker
	// id for the server's re-attach grace).
	w.acks.hold()
	finished := make(chan struct{})
	go func() {
		w.handlers.Wait()
		close(finished)
	}()
	select {
	case <-finished:
	case <-time.After(w.drainTimeout):
		w.mu.Lock()
		for receipt, r := range w.running {
			w.cut[receipt] = true
			r.cancel(errors.New("the worker's drain ran out of time"))
		}
		w.mu.Unlock()
	}
	closeStreams()
	<-consumed
	w.acks.flush()
	w.mu.Lock()
	back := make([]nack, 0, len(w.unstarted)+len(w.cut)+len(w.heldNacks))
	for _, receipt := range w.unstarted {
		back = append(back, nack{receipt: receipt})
	}
	for receipt := range w.cut {
		back = append(back, nack{receipt: receipt})
	}
	back = append(back, w.heldNacks...)
	w.mu.Unlock()
	var sent sync.WaitGroup
	for _, n := range back {
		sent.Go(func() { w.nack(n) })
	}
	sent.Wait()
}

// acker sends acks as soon as no Ack is in flight, at most AckBatch receipts each.
type acker struct {
	c     *Client
	queue string
	log   *slog.Logger

	mu      sync.Mutex
	idle    *sync.Cond
	pending []string
	results map[string][]byte
	held    bool
	sending bool
}

func newAcker(c *Client, queue string, log *slog.Logger) *acker {
	a := &acker{c: c, queue: queue, log: log, results: map[string][]byte{}}
	a.idle = sync.NewCond(&a.mu)
	return a
}

func (a *acker) add(receipt string, result []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pending = append(a.pending, receipt)
	if result != nil {
		a.results[receipt] = result
	}
	a.start()
}

// start sends what is pending unless an Ack is in flight or acks are held (a.mu
// held).
func (a *acker) start() {
	if !a.held && !a.sending && len(a.pending) > 0 {
		a.sending = true
		go a.send()
	}
}

func (a *acker) has(receipt string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, pending := range a.pending {
		if pending == receipt {
			return true
		}
	}
	return false
}

func (a *acker) send() {
	a.mu.Lock()
	for len(a.pending) > 0 && !a.held {
		batch := append([]string(nil), a.pending[:min(AckBatch, len(a.pending))]...)
		results := map[string][]byte{}
		for _, receipt := range batch {
			if result, ok := a.results[receipt]; ok {
				results[receipt] = result
				delete(a.results, receipt)
			}
		}
		a.mu.Unlock()
		_, err := retry(context.Background(), func(ctx context.Context) (*pb.AckResponse, error) {
			return a.c.Raw.Queues.Ack(ctx, &pb.AckRequest{Queue: a.queue, Receipts: batch, Results: results})
		})
		if err != nil {
			// Unacked deliveries come back when their leases end: at least once,
			// never lost.
			a.log.Warn("turnstile: an ack failed; its tasks come back at their lease end", "queue", a.queue, "cause", err)
		}
		a.mu.Lock()
		// Receipts added while the Ack was in flight stay for the next one.
		a.pending = a.pending[len(batch):]
	}
	a.sending = false
	a.idle.Broadcast()
	a.mu.Unlock()
}

func (a *acker) hold() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held = true
}

// flush sends everything pending (also what was held) and waits until it is sent.
func (a *acker) flush() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.held = false
	a.start()
	for a.sending {
		a.idle.Wait()
	}
}
