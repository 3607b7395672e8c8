package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"go.uber.org/zap"

	"github.com/delayq/delayq/shard"
)

// GET /v1/export: what delayq export writes, a page at a time, as JSON
// Lines (application/x-ndjson) that POST /v1/messages/batch or delayq
// enqueue -f read back: the scheduled messages (kind=messages, the
// default), the recurring schedules (kind=schedules, whole, as schedule
// set --file reads them) or the dead messages (kind=dead, as enqueue -f
// puts them back in the dead set). A page holds up to limit lines
// (default 1,000, at most 10,000) and about MaxExportPage bytes; while
// more may follow, the X-Delayq-Next header has the cursor to pass as
// after. It needs a grant of read for the whole namespace: an export is
// every message's body.

// MaxExportPage is about the most bytes of one page of GET /v1/export.
const MaxExportPage = 8 << 20

// errPageFull stops a walk once a page is full.
var errPageFull = errors.New("page full")

func (a *API) export(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit := 1000
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 10_000 {
			problem(w, http.StatusBadRequest, "invalid limit", fmt.Sprintf("%q, want 1 to 10000", s), "limit")
			return
		}
		limit = n
	}
	kind := q.Get("kind")
	if kind == "schedules" && q.Get("after") != "" {
		problem(w, http.StatusBadRequest, "invalid after", "the schedules are exported whole, on one page", "after")
		return
	}
	var page bytes.Buffer
	lines := 0
	next, err := a.Export(r.Context(), kind, q.Get("after"), func(line []byte) bool {
		page.Write(line)
		lines++
		return lines >= limit || page.Len() >= MaxExportPage
	})
	if err != nil {
		a.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	if next != "" {
		w.Header().Set("X-Delayq-Next", next)
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(page.Bytes())
}

// Export hands line, one line at a time, what a page of GET /v1/export
// of kind ("messages" or "", "schedules", "dead") after the cursor holds,
// until line says the page is full, and returns the cursor after the
// page ("" at the end): what the endpoint and the console's export
// download run. The schedules come whole, whatever line says. An unknown
// kind or a bad cursor is an *shard.InvalidError. The caller checks the
// caller may read the whole namespace.
func (a *API) Export(ctx context.Context, kind, after string, line func([]byte) bool) (string, error) {
	switch kind {
	case "", "messages":
		return a.exportMessages(ctx, after, line)
	case "dead":
		return a.exportDead(ctx, after, line)
	case "schedules":
		infos, err := a.o.Store.Schedules(ctx)
		if err != nil {
			return "", err
		}
		var b []byte
		for j := range infos {
			if b, err = shard.AppendScheduleLine(b[:0], &infos[j]); err != nil {
				return "", err
			}
			line(b)
		}
		return "", nil
	}
	return "", &shard.InvalidError{Field: "kind", Reason: fmt.Sprintf("%q, want messages, schedules or dead", kind)}
}

// exportMessages fills a page with the scheduled messages after the
// cursor (shard.ExportCursor) and returns the cursor after it, "" at the
// end. A message whose envelope cannot be read is left out, as delayq
// export leaves it out, and named in the log.
func (a *API) exportMessages(ctx context.Context, after string, full func([]byte) bool) (string, error) {
	cur, err := shard.ParseExportCursor(after)
	if err != nil {
		return "", &shard.InvalidError{Field: "after", Reason: err.Error()}
	}
	n, err := a.o.Shards(ctx)
	if err != nil {
		return "", err
	}
	var last shard.ExportCursor
	err = a.o.Store.Export(ctx, n, cur, 500, func(x shard.Exported) error {
		last = x.Next
		if x.Err != nil && !errors.Is(x.Err, shard.ErrOccurrence) {
			a.o.Log.Warn("export: left out", zap.Error(x.Err))
		}
		if x.Err == nil && full(x.Line) {
			return errPageFull
		}
		return nil
	})
	if errors.Is(err, errPageFull) {
		return last.String(), nil
	}
	return "", err
}

// exportDead fills a page with the dead messages after the cursor
// (shard.DeadCursor) and returns the cursor after it, "" at the end; one
// whose envelope cannot be read is left out and named in the log.
func (a *API) exportDead(ctx context.Context, after string, full func([]byte) bool) (string, error) {
	cur, err := shard.ParseDeadCursor(after)
	if err != nil {
		return "", err
	}
	n, err := a.o.Shards(ctx)
	if err != nil {
		return "", err
	}
	var last shard.DeadCursor
	err = a.o.Store.ExportDead(ctx, n, cur, 500, func(x shard.ExportedDead) error {
		last = x.Next
		if x.Err != nil {
			a.o.Log.Warn("export: left out", zap.Error(x.Err))
		}
		if x.Err == nil && full(x.Line) {
			return errPageFull
		}
		return nil
	})
	if errors.Is(err, errPageFull) {
		return last.String(), nil
	}
	return "", err
}
