package turnstile

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a call the server (or the library, for a bad argument it can see
// itself) refused: the gRPC code and the server's message, which names the field
// for INVALID_ARGUMENT. Compare with errors.Is against ErrInvalidArgument,
// ErrUnauthenticated and the other sentinels.
type Error struct {
	Code    codes.Code
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("turnstile: %s: %s", e.Code, e.Message)
}

// Is matches the sentinel of its code.
func (e *Error) Is(target error) bool {
	var sentinel *Error
	return errors.As(target, &sentinel) && sentinel.Message == "" && sentinel.Code == e.Code
}

// The sentinels of the codes a caller acts on: errors.Is(err, ErrInvalidArgument).
var (
	ErrInvalidArgument    error = &Error{Code: codes.InvalidArgument}
	ErrUnauthenticated    error = &Error{Code: codes.Unauthenticated}
	ErrPermissionDenied   error = &Error{Code: codes.PermissionDenied}
	ErrNotFound           error = &Error{Code: codes.NotFound}
	ErrUnavailable        error = &Error{Code: codes.Unavailable}
	ErrDeadlineExceeded   error = &Error{Code: codes.DeadlineExceeded}
	ErrResourceExhausted  error = &Error{Code: codes.ResourceExhausted}
	ErrFailedPrecondition error = &Error{Code: codes.FailedPrecondition}
)

// ErrNotAcquired is a Lock or Semaphore whose wait ran out.
var ErrNotAcquired = errors.New("turnstile: not acquired")

// ErrLeaseLost matches (errors.Is) every LeaseLostError.
var ErrLeaseLost = errors.New("turnstile: lease lost")

// LeaseLostError says why a lease is gone: it expired while no replica could be
// reached, was taken over after expiry, or was released by ReleaseAll.
type LeaseLostError struct {
	Name   string
	Reason string
}

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("turnstile: the lease of %q was lost: %s", e.Name, e.Reason)
}

// Is matches ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// TaskFailedError is a Call whose task went DEAD (or was cancelled): its last error.
type TaskFailedError struct {
	ID        string
	State     TaskState
	LastError string
}

func (e *TaskFailedError) Error() string {
	return fmt.Sprintf("turnstile: task %q ended %s: %s", e.ID, e.State, e.LastError)
}

// fromStatus turns a gRPC error into an *Error (a context's own end stays itself).
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var known *Error
	if errors.As(err, &known) {
		return err
	}
	if s, ok := status.FromError(err); ok {
		return &Error{Code: s.Code(), Message: s.Message()}
	}
	return err
}

// final reports a code a long-lived stream will not get past by opening again.
func final(err error) bool {
	code := status.Code(err)
	var known *Error
	if errors.As(err, &known) {
		code = known.Code
	}
	switch code {
	case codes.InvalidArgument, codes.Unauthenticated, codes.PermissionDenied,
		codes.FailedPrecondition, codes.Unimplemented:
		return true
	}
	return false
}

// invalid is the INVALID_ARGUMENT of a bad argument the library sees itself; the
// message starts with the field's name, as the server's do.
func invalid(format string, args ...any) *Error {
	return &Error{Code: codes.InvalidArgument, Message: fmt.Sprintf(format, args...)}
}
