package e2e

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// receivedSpan is a span as an OTLP/HTTP exporter sent it.
type receivedSpan struct {
	Service, Name           string
	TraceID, SpanID, Parent string // hex; Parent "" for a root
	Attrs                   map[string]string
}

// spanReceiver is an OTLP/HTTP trace receiver (protobuf), in process: the
// endpoint agq and agw are given by OTEL_EXPORTER_OTLP_ENDPOINT.
type spanReceiver struct {
	URL   string
	mu    sync.Mutex
	spans []receivedSpan
}

func newSpanReceiver(t *testing.T) *spanReceiver {
	t.Helper()
	r := &spanReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &export)
		}
		if req.URL.Path != "/v1/traces" || err != nil {
			t.Errorf("the receiver got %s %s: %v", req.Method, req.URL.Path, err)
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		r.add(&export)
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *spanReceiver) add(export *coltracepb.ExportTraceServiceRequest) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range export.ResourceSpans {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, receivedSpan{Service: service, Name: s.Name,
					TraceID: hex.EncodeToString(s.TraceId), SpanID: hex.EncodeToString(s.SpanId),
					Parent: hex.EncodeToString(s.ParentSpanId), Attrs: attrs(s.Attributes)})
			}
		}
	}
}

// received are the spans received so far.
func (r *spanReceiver) received() []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receivedSpan(nil), r.spans...)
}

// attrs are OTLP attributes as text.
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = v.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = map[bool]string{true: "true", false: "false"}[v.BoolValue]
		}
	}
	return m
}
