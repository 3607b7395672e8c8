package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/shard"
)

// TestFarOverHTTP: the far tier is read with a read token, turned on and
// off with an admin one; on is a 409 naming a scanner of an older
// version, bad input a 400 naming the field, and neither changes
// anything.
func TestFarOverHTTP(t *testing.T) {
	f := newFixture(t)
	t.Parallel()
	if code, v := f.do("GET", "/v1/far", readToken, "", ""); code != http.StatusOK || v["state"] != "off" {
		t.Fatalf("far before on: %d %v", code, v)
	}
	for _, c := range []struct{ body, field string }{
		{`{}`, "on"},
		{`{"on":true,"horizon":"soon"}`, "horizon"},
		{`{"on":true,"horizon":"-1h"}`, "horizon"},
		{`{"on":false,"horizon":"1h"}`, "horizon"},
		{`{"on":true,"bucket_width":"0s"}`, "bucket_width"},
		{`{"on":true,"index_slots":-1}`, "index_slots"},
		{`{"on":true,"horizon":"1m","bucket_width":"10m"}`, "far"},
		{`{"on":true,"colour":"red"}`, "colour"},
	} {
		if code, v := f.do("PUT", "/v1/far", adminToken, js, c.body); code != http.StatusBadRequest || v["field"] != c.field {
			t.Errorf("PUT /v1/far %s: %d %v, want 400 naming %s", c.body, code, v, c.field)
		}
	}
	if code, _ := f.do("PUT", "/v1/far", readToken, js, `{"on":true}`); code != http.StatusForbidden {
		t.Errorf("a read token turns the tier on: %d", code)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	until := float64(time.Now().Add(time.Hour).UnixMilli())
	if err := rdb.ZAdd(ctx, shard.ScannersKey(f.st.Namespace()), redis.Z{Score: until, Member: "old-scanner"},
		redis.Z{Score: until, Member: shard.FarMemberID("new-scanner")}).Err(); err != nil {
		t.Fatal(err)
	}
	code, v := f.do("PUT", "/v1/far", adminToken, js, `{"on":true}`)
	if code != http.StatusConflict || !strings.Contains(v["detail"].(string), "old-scanner") {
		t.Fatalf("on with an older scanner: %d %v", code, v)
	}
	if code, v := f.do("GET", "/v1/far", readToken, "", ""); code != http.StatusOK || v["state"] != "off" || v["scanners"] != 2.0 {
		t.Fatalf("far after a refused on: %d %v", code, v)
	}
	if err := rdb.ZRem(ctx, shard.ScannersKey(f.st.Namespace()), "old-scanner").Err(); err != nil {
		t.Fatal(err)
	}
	code, v = f.do("PUT", "/v1/far", adminToken, js, `{"on":true,"horizon":"2h"}`)
	if code != http.StatusOK || v["state"] != "on" || v["horizon"] != "2h0m0s" || v["bucket_width"] != "10m0s" || v["index_slots"] != 4096.0 {
		t.Fatalf("on: %d %v", code, v)
	}
	if code, v = f.do("PUT", "/v1/far", adminToken, js, `{"on":true,"bucket_width":"1m"}`); code != http.StatusBadRequest || v["field"] != "far" {
		t.Fatalf("a new width once set: %d %v", code, v)
	}
	if code, v = f.do("PUT", "/v1/far", adminToken, js, `{"on":false}`); code != http.StatusOK || v["state"] != "turned-off" {
		t.Fatalf("off: %d %v", code, v)
	}
	if code, v = f.do("PUT", "/v1/far", adminToken, js, `{"on":true}`); code != http.StatusOK || v["state"] != "on" || v["horizon"] != "1h0m0s" {
		t.Fatalf("on again: %d %v", code, v)
	}
}
