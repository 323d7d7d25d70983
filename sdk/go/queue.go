package turnstile

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "turnstile.dev/turnstile-go/pb/turnstile/v1"
)

// waitMargin is how much longer than a server-side wait a call's deadline runs.
const waitMargin = 5 * time.Second

// Queue is one queue of the client's tenant.
type Queue struct {
	Name string
	c    *Client
}

// Queue names a queue (nothing is sent).
func (c *Client) Queue(name string) *Queue {
	return &Queue{Name: name, c: c}
}

// NewTask is a task to enqueue. An empty ID gets a random one before the first try,
// so a retried Enqueue never adds the task twice.
type NewTask struct {
	Payload []byte
	ID      string
	// Delay or At make it due later (at most one).
	Delay       time.Duration
	At          time.Time
	Group       string
	Priority    uint32
	MaxAttempts uint32
	// DedupeWindow keeps its id reserved this long after it is done.
	DedupeWindow time.Duration
	// Replace replaces a waiting task of the same id (default: keep it).
	Replace bool
}

// EnqueueOption sets a field of the task Enqueue adds.
type EnqueueOption func(*NewTask)

// WithID names the task (default: a random id).
func WithID(id string) EnqueueOption { return func(t *NewTask) { t.ID = id } }

// WithDelay makes the task due d from now.
func WithDelay(d time.Duration) EnqueueOption { return func(t *NewTask) { t.Delay = d } }

// WithAt makes the task due at t.
func WithAt(at time.Time) EnqueueOption { return func(t *NewTask) { t.At = at } }

// WithGroup puts the task in a group.
func WithGroup(group string) EnqueueOption { return func(t *NewTask) { t.Group = group } }

// WithPriority sets the task's priority (0-9, higher first).
func WithPriority(p uint32) EnqueueOption { return func(t *NewTask) { t.Priority = p } }

// WithMaxAttempts sets how many deliveries the task gets (default 25).
func WithMaxAttempts(n uint32) EnqueueOption { return func(t *NewTask) { t.MaxAttempts = n } }

// WithDedupeWindow keeps the task's id reserved d after it is done.
func WithDedupeWindow(d time.Duration) EnqueueOption {
	return func(t *NewTask) { t.DedupeWindow = d }
}

// WithReplace replaces a waiting task of the same id instead of keeping it.
func WithReplace() EnqueueOption { return func(t *NewTask) { t.Replace = true } }

// JSONPayload encodes v as a JSON payload.
func JSONPayload(v any) ([]byte, error) { return json.Marshal(v) }

// Enqueued is what Enqueue says of one task.
type Enqueued struct {
	ID       string
	Created  bool
	Replaced bool
	DueAt    time.Time
}

func (t NewTask) wire() *pb.TaskSpec {
	spec := &pb.TaskSpec{
		Id: t.ID, Payload: t.Payload, Group: t.Group, Priority: t.Priority,
		MaxAttempts: t.MaxAttempts,
	}
	if spec.Id == "" {
		spec.Id = randomHex(16)
	}
	switch {
	case !t.At.IsZero():
		spec.Schedule = &pb.TaskSpec_DueAt{DueAt: timestamppb.New(t.At)}
	case t.Delay > 0:
		spec.Schedule = &pb.TaskSpec_Delay{Delay: durationOf(t.Delay)}
	}
	if t.DedupeWindow > 0 {
		spec.DedupeWindow = durationOf(t.DedupeWindow)
	}
	if t.Replace {
		spec.OnDuplicate = pb.DuplicatePolicy_DUPLICATE_POLICY_REPLACE
	}
	return spec
}

// Enqueue adds one task.
func (q *Queue) Enqueue(ctx context.Context, payload []byte, opts ...EnqueueOption) (Enqueued, error) {
	task := NewTask{Payload: payload}
	for _, opt := range opts {
		opt(&task)
	}
	added, err := q.EnqueueMany(ctx, []NewTask{task})
	if err != nil {
		return Enqueued{}, err
	}
	return added[0], nil
}

// EnqueueMany adds up to 1,000 tasks in one atomic call, answering each in order.
func (q *Queue) EnqueueMany(ctx context.Context, tasks []NewTask) ([]Enqueued, error) {
	request := &pb.EnqueueRequest{Queue: q.Name}
	for _, task := range tasks {
		request.Tasks = append(request.Tasks, task.wire())
	}
	reply, err := retry(ctx, func(ctx context.Context) (*pb.EnqueueResponse, error) {
		return q.c.Raw.Queues.Enqueue(ctx, request)
	})
	if err != nil {
		return nil, err
	}
	added := make([]Enqueued, len(reply.Results))
	for i, r := range reply.Results {
		added[i] = Enqueued{ID: r.Id, Created: r.Created, Replaced: r.Replaced, DueAt: timeOf(r.DueAt)}
	}
	return added, nil
}

// Call is a remote call through the queue: it enqueues one task and waits up to
// timeout (at most 1 h) for a worker's result. A task that went DEAD or was
// cancelled is a *TaskFailedError with its last error; one not done in time,
// ErrDeadlineExceeded.
func (q *Queue) Call(ctx context.Context, payload []byte, timeout time.Duration, opts ...EnqueueOption) ([]byte, error) {
	task := NewTask{Payload: payload}
	for _, opt := range opts {
		opt(&task)
	}
	request := &pb.EnqueueRequest{Queue: q.Name, Tasks: []*pb.TaskSpec{task.wire()}, Wait: durationOf(timeout)}
	ctx, cancel := context.WithTimeout(ctx, timeout+waitMargin)
	defer cancel()
	reply, err := retry(ctx, func(ctx context.Context) (*pb.EnqueueResponse, error) {
		return q.c.Raw.Queues.Enqueue(ctx, request)
	})
	if err != nil {
		return nil, err
	}
	result := reply.Results[0]
	if !result.Done {
		return nil, &Error{Code: codes.DeadlineExceeded, Message: "task " + result.Id + " not done within " + timeout.String()}
	}
	done := taskOf(result.Task, q.Name)
	if done.State != Completed {
		return nil, &TaskFailedError{ID: done.ID, State: done.State, LastError: done.LastError}
	}
	return done.Result, nil
}

// Get is the task in whatever state, with its history, last error, progress and
// (kept completed tasks) result; ErrNotFound when the queue does not hold it.
func (q *Queue) Get(ctx context.Context, id string) (*Task, error) {
	reply, err := retry(ctx, func(ctx context.Context) (*pb.Task, error) {
		return q.c.Raw.Queues.GetTask(ctx, &pb.GetTaskRequest{Queue: q.Name, Id: id})
	})
	if err != nil {
		return nil, err
	}
	return taskOf(reply, q.Name), nil
}

// Wait waits up to timeout (at most 1 h) for the task to be done (completed, dead
// or cancelled): the task as it ended, or nil when it was not done in time.
func (q *Queue) Wait(ctx context.Context, id string, timeout time.Duration) (*Task, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout+waitMargin)
	defer cancel()
	reply, err := retry(ctx, func(ctx context.Context) (*pb.WaitResponse, error) {
		return q.c.Raw.Queues.Wait(ctx, &pb.WaitRequest{Queue: q.Name, Id: id, Timeout: durationOf(timeout)})
	})
	if err != nil || !reply.Done {
		return nil, err
	}
	return taskOf(reply.Task, q.Name), nil
}

// Stats are a queue's counts.
type Stats struct {
	Ready, Delayed, InFlight, Dead uint64
	// OldestReadyAt is the due time of the oldest READY task (zero when none).
	OldestReadyAt time.Time
	// NextDueAt is the due time of the next DELAYED task (zero when none).
	NextDueAt time.Time
	Paused    bool
}

// Stats counts the queue's tasks by state.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	reply, err := retry(ctx, func(ctx context.Context) (*pb.StatsResponse, error) {
		return q.c.Raw.Queues.Stats(ctx, &pb.StatsRequest{Queue: q.Name})
	})
	if err != nil {
		return Stats{}, err
	}
	return Stats{
		Ready: reply.Ready, Delayed: reply.Delayed, InFlight: reply.InFlight, Dead: reply.Dead,
		OldestReadyAt: timeOf(reply.OldestReadyAt), NextDueAt: timeOf(reply.NextDueAt),
		Paused: reply.GetConfig().GetPaused(),
	}, nil
}

// Peek shows up to limit tasks of a state in delivery order, without taking them.
func (q *Queue) Peek(ctx context.Context, state TaskState, limit uint32) ([]*Task, error) {
	wire, ok := statesToWire[state]
	if !ok {
		return nil, invalid("state: %q is not a task state", state)
	}
	reply, err := retry(ctx, func(ctx context.Context) (*pb.PeekResponse, error) {
		return q.c.Raw.Queues.Peek(ctx, &pb.PeekRequest{Queue: q.Name, State: wire, Limit: limit})
	})
	if err != nil {
		return nil, err
	}
	tasks := make([]*Task, len(reply.Tasks))
	for i, t := range reply.Tasks {
		tasks[i] = taskOf(t, q.Name)
	}
	return tasks, nil
}

// Cancel removes the tasks that are not running (with running, the running ones
// too: their handlers' contexts are cancelled); the ids removed.
func (q *Queue) Cancel(ctx context.Context, ids []string, running bool) ([]string, error) {
	reply, err := retry(ctx, func(ctx context.Context) (*pb.CancelResponse, error) {
		return q.c.Raw.Queues.Cancel(ctx, &pb.CancelRequest{Queue: q.Name, Ids: ids, Running: running})
	})
	return reply.GetCancelled(), err
}

// Redrive moves DEAD tasks (these ids, or all when none) back to READY; how many.
func (q *Queue) Redrive(ctx context.Context, ids ...string) (uint64, error) {
	reply, err := retry(ctx, func(ctx context.Context) (*pb.RedriveResponse, error) {
		return q.c.Raw.Queues.Redrive(ctx, &pb.RedriveRequest{Queue: q.Name, Ids: ids})
	})
	return reply.GetRedriven(), err
}

// Pause stops deliveries of the queue, or of one group when group is given.
func (q *Queue) Pause(ctx context.Context, group ...string) error {
	return q.setPaused(ctx, true, group)
}

// Resume lets the queue (or one group) deliver again.
func (q *Queue) Resume(ctx context.Context, group ...string) error {
	return q.setPaused(ctx, false, group)
}

func (q *Queue) setPaused(ctx context.Context, paused bool, group []string) error {
	if len(group) > 0 {
		_, err := retry(ctx, func(ctx context.Context) (*pb.ConfigureGroupResponse, error) {
			return q.c.Raw.Queues.ConfigureGroup(ctx, &pb.ConfigureGroupRequest{Queue: q.Name, Group: group[0], Paused: &paused})
		})
		return err
	}
	return q.Configure(ctx, QueueConfig{Paused: &paused})
}

// RateLimit lets at most Burst + Limit × t / Period deliveries start in any
// interval of length t.
type RateLimit struct {
	Limit  uint32
	Period time.Duration
	Burst  uint32
}

// QueueConfig changes the fields that are set (nil leaves a field as it is; a zero
// cap or a zero Limit removes it).
type QueueConfig struct {
	Paused           *bool
	MaxInFlight      *uint32
	GroupMaxInFlight *uint32
	RateLimit        *RateLimit
	GroupRateLimit   *RateLimit
	// KeepCompleted keeps acked and cancelled tasks (with their results and
	// history); KeepDead bounds the DEAD ones kept.
	KeepCompleted *Retention
	KeepDead      *Retention
}

// Retention bounds the ended tasks a queue keeps: none older than Age (0: no bound)
// nor more than Count of a state (0: no bound).
type Retention struct {
	Age   time.Duration
	Count uint32
}

func (r *Retention) wire() *pb.Retention {
	if r == nil {
		return nil
	}
	return &pb.Retention{Age: durationOf(r.Age), Count: r.Count}
}

func (r *RateLimit) wire() *pb.RateLimit {
	if r == nil {
		return nil
	}
	limit := &pb.RateLimit{Limit: r.Limit, Burst: r.Burst}
	if r.Period > 0 {
		limit.Period = durationOf(r.Period)
	}
	return limit
}

// Configure changes the queue's flow control.
func (q *Queue) Configure(ctx context.Context, config QueueConfig) error {
	request := &pb.ConfigureQueueRequest{
		Queue: q.Name, Paused: config.Paused, MaxInFlight: config.MaxInFlight,
		GroupMaxInFlight: config.GroupMaxInFlight, RateLimit: config.RateLimit.wire(),
		GroupRateLimit: config.GroupRateLimit.wire(), KeepCompleted: config.KeepCompleted.wire(),
		KeepDead: config.KeepDead.wire(),
	}
	_, err := retry(ctx, func(ctx context.Context) (*pb.ConfigureQueueResponse, error) {
		return q.c.Raw.Queues.ConfigureQueue(ctx, request)
	})
	return err
}

// trimError cuts a Nack's error text to what the server keeps (4 KiB), at a rune
// boundary.
func trimError(text string) string {
	const most = 4096
	if len(text) <= most {
		return text
	}
	return strings.ToValidUTF8(text[:most], "")
}
