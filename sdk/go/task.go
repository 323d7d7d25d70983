package turnstile

import (
	"encoding/json"
	"sync"
	"time"

	pb "turnstile.dev/turnstile-go/pb/turnstile/v1"
)

// TaskState is where a task is: "delayed", "ready", "in_flight", "dead",
// "completed" or "cancelled".
type TaskState string

// The task states.
const (
	Delayed   TaskState = "delayed"
	Ready     TaskState = "ready"
	InFlight  TaskState = "in_flight"
	Dead      TaskState = "dead"
	Completed TaskState = "completed"
	Cancelled TaskState = "cancelled"
)

var statesToWire = map[TaskState]pb.TaskState{
	Delayed: pb.TaskState_TASK_STATE_DELAYED, Ready: pb.TaskState_TASK_STATE_READY,
	InFlight: pb.TaskState_TASK_STATE_IN_FLIGHT, Dead: pb.TaskState_TASK_STATE_DEAD,
	Completed: pb.TaskState_TASK_STATE_COMPLETED, Cancelled: pb.TaskState_TASK_STATE_CANCELLED,
}

func stateOf(wire pb.TaskState) TaskState {
	for state, w := range statesToWire {
		if w == wire {
			return state
		}
	}
	return ""
}

// Attempt is one delivery in a task's history.
type Attempt struct {
	Number   uint32
	WorkerID string
	LeasedAt time.Time
	EndedAt  time.Time
	// Outcome: "acked", "nacked", "expired", "gave_up", "cancelled", or "" while it
	// runs.
	Outcome string
	Error   string
}

// Task is a task as the server shows it, or as a worker's handler gets it.
type Task struct {
	ID          string
	Queue       string
	Payload     []byte
	State       TaskState
	DueAt       time.Time
	EnqueuedAt  time.Time
	Attempt     uint32
	MaxAttempts uint32
	Group       string
	Priority    uint32
	// LastError is the error of its last failed delivery.
	LastError string
	// Progress is the handler's latest word (SetProgress), carried to a retry.
	Progress []byte
	// Result is what a completed task returned (kept tasks only).
	Result  []byte
	History []Attempt
	// Receipt identifies this delivery (empty outside a worker).
	Receipt string

	mu       sync.Mutex
	progress []byte
	result   []byte
}

func taskOf(wire *pb.Task, queue string) *Task {
	t := &Task{
		ID: wire.Id, Queue: queue, Payload: wire.Payload, State: stateOf(wire.State),
		DueAt: timeOf(wire.DueAt), EnqueuedAt: timeOf(wire.EnqueuedAt),
		Attempt: wire.Attempt, MaxAttempts: wire.MaxAttempts, Group: wire.Group,
		Priority: wire.Priority, LastError: wire.LastError, Progress: wire.Progress,
		Result: wire.Result, Receipt: wire.Receipt,
	}
	for _, a := range wire.History {
		t.History = append(t.History, Attempt{
			Number: a.Number, WorkerID: a.WorkerId, LeasedAt: timeOf(a.LeasedAt),
			EndedAt: timeOf(a.EndedAt), Outcome: outcomeName(a.Outcome), Error: a.Error,
		})
	}
	return t
}

func outcomeName(o pb.AttemptOutcome) string {
	switch o {
	case pb.AttemptOutcome_ATTEMPT_OUTCOME_ACKED:
		return "acked"
	case pb.AttemptOutcome_ATTEMPT_OUTCOME_NACKED:
		return "nacked"
	case pb.AttemptOutcome_ATTEMPT_OUTCOME_EXPIRED:
		return "expired"
	case pb.AttemptOutcome_ATTEMPT_OUTCOME_GAVE_UP:
		return "gave_up"
	case pb.AttemptOutcome_ATTEMPT_OUTCOME_CANCELLED:
		return "cancelled"
	}
	return ""
}

// Text is the payload as a string.
func (t *Task) Text() string { return string(t.Payload) }

// JSON decodes the payload into v.
func (t *Task) JSON(v any) error { return json.Unmarshal(t.Payload, v) }

// SetProgress records the handler's latest word: it rides on the next lease
// extension, and a retry of the task gets it as Progress.
func (t *Task) SetProgress(data []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.progress = append([]byte(nil), data...)
}

// SetResult sets what the task returns when its handler succeeds (at most 64 KiB;
// kept with a completed task and handed to its waiters).
func (t *Task) SetResult(data []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.result = append([]byte(nil), data...)
}

func (t *Task) takeProgress() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	progress := t.progress
	t.progress = nil
	return progress
}

func (t *Task) takeResult() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.result
}
