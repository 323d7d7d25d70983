package turnstile

import (
	"context"
	"errors"
	"strings"
	"time"

	"google.golang.org/grpc/codes"

	pb "turnstile.dev/turnstile-go/pb/turnstile/v1"
)

// Schedules are the tenant's schedules (ScheduleService).
type Schedules struct {
	c *Client
}

// Schedules is the client's ScheduleService.
func (c *Client) Schedules() *Schedules { return &Schedules{c: c} }

// ScheduleSpec is a schedule to put: exactly one of Cron and Every.
type ScheduleSpec struct {
	Name  string
	Queue string
	// Cron is five fields (or six, seconds first) or @hourly and the like, read on
	// TimeZone's wall clock (default UTC).
	Cron     string
	TimeZone string
	// Every fires at each multiple of it since the Unix epoch (at least 1 s).
	Every time.Duration
	// The task each fire enqueues.
	Payload     []byte
	MaxAttempts uint32
	Priority    uint32
	Group       string
	// SkipOverlap skips a fire while the last fire's task is still in the queue.
	SkipOverlap bool
	// CatchUp is how old a missed fire time may be and still be enqueued on recovery
	// (default 1 minute).
	CatchUp time.Duration
	Paused  bool
}

// Schedule is a schedule as the server keeps it.
type Schedule struct {
	ScheduleSpec
	NextFireAt time.Time
	LastFireAt time.Time
}

func (s ScheduleSpec) wire() (*pb.Schedule, error) {
	if (s.Cron == "") == (s.Every == 0) {
		return nil, invalid("cron: give exactly one of Cron and Every")
	}
	wire := &pb.Schedule{
		Name: s.Name, Queue: s.Queue, TimeZone: s.TimeZone, Paused: s.Paused,
		Overlap: pb.OverlapPolicy_OVERLAP_POLICY_ALLOW,
		Task:    &pb.ScheduledTask{Payload: s.Payload, MaxAttempts: s.MaxAttempts, Priority: s.Priority, Group: s.Group},
	}
	if s.SkipOverlap {
		wire.Overlap = pb.OverlapPolicy_OVERLAP_POLICY_SKIP
	}
	if s.Cron != "" {
		wire.Spec = &pb.Schedule_Cron{Cron: s.Cron}
	} else {
		wire.Spec = &pb.Schedule_Every{Every: durationOf(s.Every)}
	}
	if s.CatchUp > 0 {
		wire.CatchUpWindow = durationOf(s.CatchUp)
	}
	return wire, nil
}

func scheduleOf(wire *pb.Schedule) *Schedule {
	s := &Schedule{
		ScheduleSpec: ScheduleSpec{
			Name: wire.Name, Queue: wire.Queue, Cron: wire.GetCron(), TimeZone: wire.TimeZone,
			Payload: wire.GetTask().GetPayload(), MaxAttempts: wire.GetTask().GetMaxAttempts(),
			Priority: wire.GetTask().GetPriority(), Group: wire.GetTask().GetGroup(),
			SkipOverlap: wire.Overlap == pb.OverlapPolicy_OVERLAP_POLICY_SKIP, Paused: wire.Paused,
		},
		NextFireAt: timeOf(wire.NextFireAt),
		LastFireAt: timeOf(wire.LastFireAt),
	}
	if every := wire.GetEvery(); every != nil {
		s.Every = every.AsDuration()
	}
	if wire.CatchUpWindow != nil {
		s.CatchUp = wire.CatchUpWindow.AsDuration()
	}
	return s
}

// Put creates or replaces a schedule.
func (s *Schedules) Put(ctx context.Context, spec ScheduleSpec) (*Schedule, error) {
	wire, err := spec.wire()
	if err != nil {
		return nil, err
	}
	return s.put(ctx, wire)
}

func (s *Schedules) put(ctx context.Context, wire *pb.Schedule) (*Schedule, error) {
	reply, err := retry(ctx, func(ctx context.Context) (*pb.PutScheduleResponse, error) {
		return s.c.Raw.Schedules.PutSchedule(ctx, &pb.PutScheduleRequest{Schedule: wire})
	})
	if err != nil {
		return nil, err
	}
	return scheduleOf(reply.Schedule), nil
}

// Get is the schedule, or nil when there is none.
func (s *Schedules) Get(ctx context.Context, name string) (*Schedule, error) {
	wire, err := s.get(ctx, name)
	if wire == nil || err != nil {
		return nil, err
	}
	return scheduleOf(wire), nil
}

func (s *Schedules) get(ctx context.Context, name string) (*pb.Schedule, error) {
	reply, err := retry(ctx, func(ctx context.Context) (*pb.GetScheduleResponse, error) {
		return s.c.Raw.Schedules.GetSchedule(ctx, &pb.GetScheduleRequest{Name: name})
	})
	if errors.Is(err, ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return reply.Schedule, nil
}

// List is every schedule whose name starts with prefix, by name (all pages).
func (s *Schedules) List(ctx context.Context, prefix string) ([]*Schedule, error) {
	var found []*Schedule
	token := ""
	for {
		reply, err := retry(ctx, func(ctx context.Context) (*pb.ListSchedulesResponse, error) {
			return s.c.Raw.Schedules.ListSchedules(ctx, &pb.ListSchedulesRequest{PageSize: 1000, PageToken: token})
		})
		if err != nil {
			return nil, err
		}
		for _, wire := range reply.Schedules {
			if strings.HasPrefix(wire.Name, prefix) {
				found = append(found, scheduleOf(wire))
			}
		}
		if token = reply.NextPageToken; token == "" {
			return found, nil
		}
	}
}

// Delete stops the schedule's fires; whether there was one.
func (s *Schedules) Delete(ctx context.Context, name string) (bool, error) {
	reply, err := retry(ctx, func(ctx context.Context) (*pb.DeleteScheduleResponse, error) {
		return s.c.Raw.Schedules.DeleteSchedule(ctx, &pb.DeleteScheduleRequest{Name: name})
	})
	return reply.GetDeleted(), err
}

// Pause stops the schedule's fires (Trigger still works).
func (s *Schedules) Pause(ctx context.Context, name string) (*Schedule, error) {
	return s.setPaused(ctx, name, true)
}

// Resume fires the schedule again from now on.
func (s *Schedules) Resume(ctx context.Context, name string) (*Schedule, error) {
	return s.setPaused(ctx, name, false)
}

func (s *Schedules) setPaused(ctx context.Context, name string, paused bool) (*Schedule, error) {
	wire, err := s.get(ctx, name)
	if err != nil {
		return nil, err
	}
	if wire == nil {
		return nil, &Error{Code: codes.NotFound, Message: "name: no schedule " + name}
	}
	wire.Paused = paused
	wire.NextFireAt, wire.LastFireAt = nil, nil
	return s.put(ctx, wire)
}

// Trigger enqueues one more task of the schedule now; its id.
func (s *Schedules) Trigger(ctx context.Context, name string) (string, error) {
	reply, err := retry(ctx, func(ctx context.Context) (*pb.TriggerScheduleResponse, error) {
		return s.c.Raw.Schedules.TriggerSchedule(ctx, &pb.TriggerScheduleRequest{Name: name})
	})
	return reply.GetId(), err
}
