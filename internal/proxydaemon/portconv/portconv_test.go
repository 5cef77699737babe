package portconv

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agentsandbox/sandbox/port"
)

// fill sets every exported field of the value v points to (recursively) to a value
// that is not its zero, leaving out functions and interfaces (what stays with the
// host: a policy's credential source and audit callback).
func fill(t *testing.T, v reflect.Value, depth int) {
	t.Helper()
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.UnixMilli(1_700_000_000_000).UTC()))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), depth+1)
			}
		}
	case reflect.String:
		v.SetString("x" + v.Type().Name())
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(7 + depth))
	case reflect.Uint64:
		v.SetUint(uint64(7 + depth))
	case reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(t, s.Index(i), depth+1)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, depth+1)
		fill(t, e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(t, p.Elem(), depth+1)
		v.Set(p)
	case reflect.Func, reflect.Interface:
	default:
		t.Fatalf("fill: no value for a %s: teach the test", v.Type())
	}
}

func filled[T any](t *testing.T) T {
	var v T
	fill(t, reflect.ValueOf(&v).Elem(), 0)
	return v
}

// TestRoundTrips: every field of every port type the admin API carries survives the
// trip to the wire and back. A field added to port and not to api/proxydapi (or not
// converted here) fails this test, or the build where the types are converted whole.
func TestRoundTrips(t *testing.T) {
	pol := filled[port.EgressPolicy](t)
	back := EgressPolicy(WireEgressPolicy(pol))
	pol.Credentials, pol.OnAudit = nil, nil // the host's own, never on the wire
	if !reflect.DeepEqual(back, pol) {
		t.Errorf("egress policy:\n got %+v\nwant %+v", back, pol)
	}
	if a := filled[port.Attribution](t); Attribution(WireAttribution(a)) != a {
		t.Errorf("attribution %+v", a)
	}
	if b := filled[port.Budget](t); Budget(WireBudget(b)) != b {
		t.Errorf("budget %+v", b)
	}
	recs := filled[[]port.AuditRecord](t)
	if got := AuditRecords(WireAuditRecords(recs)); !reflect.DeepEqual(got, recs) {
		t.Errorf("audit records %+v", got)
	}
	eg := filled[[]port.EgressRecord](t)
	if got := EgressRecords(WireEgressRecords(eg)); !reflect.DeepEqual(got, eg) {
		t.Errorf("egress records %+v", got)
	}
	sum := filled[port.EgressSummary](t)
	if got := EgressSummary(WireEgressSummary(&sum)); !reflect.DeepEqual(*got, sum) {
		t.Errorf("egress summary %+v", got)
	}
	att := filled[port.Attestation](t)
	got, err := Attestation(WireAttestation(&att))
	if err != nil || !reflect.DeepEqual(*got, att) {
		t.Errorf("attestation %+v, %v", got, err)
	}
}

// TestNilsStayNil: what a run does not have stays absent on the wire and back.
func TestNilsStayNil(t *testing.T) {
	if WireAuditRecords(nil) != nil || EgressRecords(nil) != nil || WireEgressSummary(nil) != nil || EgressSummary(nil) != nil || WireAttestation(nil) != nil {
		t.Error("a nil became a value")
	}
	for _, b := range []string{"", "null"} {
		if a, err := Attestation([]byte(b)); a != nil || err != nil {
			t.Errorf("Attestation(%q) = %v, %v", b, a, err)
		}
	}
	if _, err := Attestation([]byte(`{"uid":"x"}`)); !errors.Is(err, port.ErrInternal) {
		t.Errorf("a bad report: %v, want ErrInternal", err)
	}
	if got := WireAuditRecords([]port.AuditRecord{}); got == nil || len(got) != 0 {
		t.Errorf("an empty audit became %#v, want an empty list (JSON [])", got)
	}
}
