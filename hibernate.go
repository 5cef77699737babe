package sandbox

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/agentsandbox/sandbox/internal/logattr"
	"github.com/agentsandbox/sandbox/internal/statearchive"
	"github.com/agentsandbox/sandbox/port"
)

// A session that outlives its sandbox: Session.Hibernate ends the sandbox (its
// memory freed) and saves the session's durable state, its workspace and the
// writable mounts it declares, in a HibernationStore on the host; Sandbox.Resume
// (a live session) and Sandbox.RunFrom (one run, served by a warm or pre-booted pool
// where one matches) start a fresh sandbox from it later, on this host or another that
// reaches the store. Starting several from one hibernation forks it: each gets its own
// copy of the state, run ID, attribution and budget.
//
// Each sandbox's life is a segment: its own run ID, proxy, audit and budget. The
// Result of a segment lists every segment of the session so far (Result.Segments),
// with the audit and reconciled usage of each, so a host can tell what came from
// which sandbox.
//
// What is saved is what the agent wrote, and it comes back as hostile input: only
// directories and regular files are saved (links, FIFOs, sockets and devices are
// left out and listed in SavedState.Skipped), and a saved state is restored only if
// it still holds nothing else, with local names, within StateLimits; anything else
// refuses the resume before a sandbox starts (*StateError). Nothing of the host's is
// ever in it: the LLM key and tokens never enter a sandbox, the proxy's socket lives
// outside the workspace, and HibernateOptions.Exclude leaves out what a template
// knows holds an agent's own credentials.

// StateLimits bound the state a hibernation saves and a resume restores (see
// HibernationStore); zero fields take the defaults: 8 GiB in all, 2 GiB per file,
// 1,000,000 entries, 128 directories deep.
type StateLimits = statearchive.Limits

// StateError is a saved state refused on the way back: an entry that is not a
// directory or a regular file, a name that leaves its directory, a limit passed. It
// wraps port.ErrInvalidSpec.
type StateError = statearchive.Error

// HibernationStore keeps hibernated sessions' saved state under a directory of the
// host (mode 0700; a file system other hosts mount lets them resume it). Each
// hibernation is a directory named by its ID holding a manifest (the segments, with
// their audit and usage, and what was saved) and one tar stream per saved tree,
// each checked against its SHA-256 in the manifest before it is restored.
type HibernationStore struct {
	dir string
	lim StateLimits
}

// StoreOption configures a HibernationStore.
type StoreOption func(*HibernationStore) error

// WithStateLimits bounds what the store saves and restores (default StateLimits{}).
func WithStateLimits(l StateLimits) StoreOption {
	return func(s *HibernationStore) error {
		if l.MaxBytes < 0 || l.MaxFileBytes < 0 || l.MaxEntries < 0 || l.MaxDepth < 0 {
			return port.Invalidf("negative state limit %+v", l)
		}
		s.lim = l
		return nil
	}
}

// NewHibernationStore returns a store in dir (absolute; created at the first save).
func NewHibernationStore(dir string, opts ...StoreOption) (*HibernationStore, error) {
	if !filepath.IsAbs(dir) {
		return nil, port.Invalidf("hibernation store %q is not an absolute path", dir)
	}
	s := &HibernationStore{dir: filepath.Clean(dir)}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Dir is the store's directory.
func (s *HibernationStore) Dir() string { return s.dir }

// Hibernation is a hibernated session: what was saved and the segments so far. Get
// one from Session.Hibernate or HibernationStore.Open; resume it with
// Sandbox.Resume or Sandbox.RunFrom, as often as wanted (each is a fork).
type Hibernation struct {
	// ID names it in its store.
	ID string `json:"id"`
	// Created is when it was saved.
	Created time.Time `json:"created"`
	// Image is the image of the segment that was hibernated (informative: a resume
	// may use another).
	Image string `json:"image"`
	// Mounts are the targets of the writable mounts saved beside the workspace; a
	// resume must give a writable mount, an empty directory, for each.
	Mounts []string `json:"mounts,omitempty"`
	// Segments are the session's segments, oldest first; the last is the one that
	// was hibernated.
	Segments []Segment `json:"segments"`
	// Saved says what the saved state holds.
	Saved SavedState `json:"saved"`

	Trees []savedTree `json:"trees"`
	store *HibernationStore
}

// SavedState says what a hibernation saved.
type SavedState struct {
	Files, Dirs int
	Bytes       int64
	// Skipped names entries not saved because they are not directories or regular
	// files (at most 100 names); SkippedCount counts them all.
	Skipped      []string `json:",omitempty"`
	SkippedCount int      `json:",omitempty"`
}

// savedTree is one tar stream of a hibernation: the workspace ("" target) or a
// mount.
type savedTree struct {
	Target string `json:"target,omitempty"`
	File   string `json:"file"`
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// Segment is one sandbox's part of a session: from its start (or resume) to its
// stop (or hibernation).
type Segment struct {
	// RunID and Attempt are the segment's run, under which its proxy attributed and
	// audited its calls.
	RunID   string `json:"run_id"`
	Attempt int    `json:"attempt,omitempty"`
	// BillingAccountID is the account the segment's calls were billed to.
	BillingAccountID string `json:"billing_account_id,omitempty"`
	// ResumedFrom is the hibernation the segment started from ("" for the first).
	ResumedFrom string `json:"resumed_from,omitempty"`
	// Started and Ended bound the segment.
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	// ExitCode and ErrorCode are the sandbox's outcome.
	ExitCode  int            `json:"exit_code"`
	ErrorCode port.ErrorCode `json:"error_code,omitempty"`
	// Audit is the proxy's record of every call of the segment.
	Audit []port.AuditRecord `json:"audit,omitempty"`
	// Usage is the segment's reconciled usage: nil until reconciled (a segment
	// hibernated without Reconcile is reconciled by the Stop of a later segment
	// that asks for it).
	Usage *port.Reconciliation `json:"usage,omitempty"`
}

// HibernateOptions configure Session.Hibernate.
type HibernateOptions struct {
	// Store keeps the saved state (required).
	Store *HibernationStore
	// Grace is how long the session's process has between SIGTERM and SIGKILL
	// (default 10 s): it may write its state on TERM.
	Grace time.Duration
	// Mounts are the targets of writable mounts of the session (Request.Mounts)
	// saved beside the workspace: a template's declared state directories.
	Mounts []string
	// Exclude are paths never saved, slash-separated: relative to the workspace, or
	// absolute under a saved mount's target (e.g. "/state/credentials"). Use them for
	// what a template knows holds an agent's own credentials or tokens, or
	// caches not worth carrying.
	Exclude []string
}

// DefaultHibernateGrace is HibernateOptions.Grace's default.
const DefaultHibernateGrace = 10 * time.Second

// Hibernate ends the session's sandbox and saves its durable state: the session is
// stopped as Stop does (SIGTERM, SIGKILL after opts.Grace, the sandbox removed and
// its memory freed; its proxy stopped; the audit, policy and usage as Stop returns
// them, in the returned Result), then the workspace and opts.Mounts are saved into
// opts.Store with the session's segments. The state is read after the sandbox is
// gone, without following links (see the package's notes on hibernation).
//
// The Result is returned whenever the session was stopped, with the hibernation's
// segments in Result.Segments. Errors: port.ErrInvalidSpec for bad options (nothing
// stopped then), those of Stop, and the save's (*StateError for a state beyond the
// store's limits); when the save fails the state is still in the workspace and the
// mounts, and the Hibernation is nil.
func (ss *Session) Hibernate(ctx context.Context, opts HibernateOptions) (*Hibernation, *Result, error) {
	fail := func(err error) (*Hibernation, *Result, error) {
		return nil, nil, fmt.Errorf("sandbox: hibernate session %s: %w", ss.req.RunID, err)
	}
	if opts.Store == nil {
		return fail(port.Invalidf("no store"))
	}
	trees, err := ss.savedTrees(opts)
	if err != nil {
		return fail(err)
	}
	if opts.Grace <= 0 {
		opts.Grace = DefaultHibernateGrace
	}
	res, stopErr := ss.Stop(ctx, opts.Grace)
	if res == nil {
		return nil, nil, stopErr
	}
	h, err := opts.Store.save(ss, res, trees)
	if err != nil {
		return nil, res, errors.Join(stopErr, fmt.Errorf("sandbox: hibernate session %s: saving its state: %w", ss.req.RunID, err))
	}
	ss.log.Info("session hibernated", "hibernation", h.ID, "files", h.Saved.Files, "bytes", h.Saved.Bytes, "skipped", h.Saved.SkippedCount)
	return h, res, stopErr
}

// treeToSave is a host directory to save and what of it to leave out.
type treeToSave struct {
	target, source string
	exclude        []string
}

// savedTrees resolves what Hibernate saves: the workspace and the declared mounts,
// each with the exclusions under it.
func (ss *Session) savedTrees(opts HibernateOptions) ([]treeToSave, error) {
	var excl []string
	var mountExcl = map[string][]string{}
	for _, e := range opts.Exclude {
		if e == "" || path.Clean(e) != e && path.Clean(e)+"/" != e {
			return nil, port.Invalidf("exclude %q is not a clean path", e)
		}
		if !path.IsAbs(e) {
			if !filepathIsLocal(e) {
				return nil, port.Invalidf("exclude %q leaves the workspace", e)
			}
			excl = append(excl, e)
			continue
		}
		found := false
		for _, t := range opts.Mounts {
			if rel, ok := under(t, e); ok {
				mountExcl[t] = append(mountExcl[t], rel)
				found = true
			}
		}
		if !found {
			return nil, port.Invalidf("exclude %q is under no saved mount", e)
		}
	}
	trees := []treeToSave{{source: ss.req.WorkspaceDir, exclude: excl}}
	for _, t := range opts.Mounts {
		i := slices.IndexFunc(ss.req.Mounts, func(m port.Mount) bool { return m.Target == t })
		if i < 0 || !ss.req.Mounts[i].Writable {
			return nil, port.Invalidf("saved mount %q is not a writable mount of the session", t)
		}
		if slices.ContainsFunc(trees, func(x treeToSave) bool { return x.target == t }) {
			return nil, port.Invalidf("mount %q saved twice", t)
		}
		trees = append(trees, treeToSave{target: t, source: ss.req.Mounts[i].Source, exclude: mountExcl[t]})
	}
	return trees, nil
}

func filepathIsLocal(p string) bool { return filepath.IsLocal(filepath.FromSlash(p)) }

// under reports whether p is under (or is) dir, and the relative rest.
func under(dir, p string) (string, bool) {
	if p == dir {
		return ".", true
	}
	if len(p) > len(dir) && p[:len(dir)] == dir && p[len(dir)] == '/' {
		return p[len(dir)+1:], true
	}
	return "", false
}

// segment is the segment the session's Result closes.
func (ss *Session) segment(res *Result) Segment {
	seg := Segment{
		RunID: ss.req.RunID, Attempt: ss.req.Attempt, BillingAccountID: ss.req.Attribution.BillingAccountID,
		Started: ss.started, Ended: time.Now(), Audit: res.Audit, Usage: res.Usage,
	}
	if ss.from != nil {
		seg.ResumedFrom = ss.from.ID
	}
	if res.Run != nil {
		seg.ExitCode, seg.ErrorCode = res.Run.ExitCode, res.Run.ErrorCode
	}
	return seg
}

// segments returns the session's segments with this one last, the earlier ones
// that lack usage reconciled when req asks for reconciliation (errors joined).
func (s *Sandbox) segments(ctx context.Context, from *Hibernation, last Segment, req Request) ([]Segment, error) {
	var segs []Segment
	if from != nil {
		segs = slices.Clone(from.Segments)
	}
	var errs []error
	if (req.Reconcile || req.ReconcileAsync) && s.reconciler != nil {
		for i := range segs {
			sg := &segs[i]
			if sg.Usage != nil || len(sg.Audit) == 0 {
				continue
			}
			u, err := s.reconcile(ctx, port.ReconcileRequest{
				RunID: sg.RunID, Attempt: sg.Attempt, BillingAccountID: sg.BillingAccountID,
				Since: sg.Started, Until: sg.Ended, Calls: sg.Audit,
			})
			sg.Usage = u
			if err != nil {
				errs = append(errs, fmt.Errorf("reconcile segment %s: %w", sg.RunID, err))
			}
		}
	}
	return append(segs, last), errors.Join(errs...)
}

// Segments are stored in hibernation manifests; a manifest is hostile input on the
// way back (like the trees), so its size is bounded.
const maxManifestBytes = 64 << 20

const manifestFile = "manifest.json"

// save writes a hibernation of ss into the store: each tree as a tar stream into a
// fresh directory, then the manifest, then the directory renamed into place.
func (st *HibernationStore) save(ss *Session, res *Result, trees []treeToSave) (*Hibernation, error) {
	segs := res.Segments
	if len(segs) == 0 {
		segs = []Segment{ss.segment(res)}
	}
	return st.saveSegments(ss.req.Image, segs, trees)
}

// saveSegments writes a hibernation with segs and trees into the store.
func (st *HibernationStore) saveSegments(image string, segs []Segment, trees []treeToSave) (*Hibernation, error) {
	if err := os.MkdirAll(st.dir, 0o700); err != nil {
		return nil, err
	}
	id := newHibernationID()
	tmp, err := os.MkdirTemp(st.dir, ".saving-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	h := &Hibernation{ID: id, Created: time.Now().UTC(), Image: image, Segments: segs, store: st}
	for i, t := range trees {
		name := "workspace.tar"
		if t.target != "" {
			name = "mount-" + strconv.Itoa(i) + ".tar"
			h.Mounts = append(h.Mounts, t.target)
		}
		f, err := os.OpenFile(filepath.Join(tmp, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		sum := sha256.New()
		rep, werr := statearchive.Write(io.MultiWriter(f, sum), t.source, t.exclude, st.lim)
		size, serr := f.Seek(0, io.SeekCurrent) // the file is new: its offset is what was written
		if err := errors.Join(werr, serr, f.Sync(), f.Close()); err != nil {
			return nil, fmt.Errorf("%s: %w", treeName(t.target), err)
		}
		h.Trees = append(h.Trees, savedTree{Target: t.target, File: name, SHA256: hex.EncodeToString(sum.Sum(nil)), Bytes: size})
		h.Saved.Files += rep.Files
		h.Saved.Dirs += rep.Dirs
		h.Saved.Bytes += rep.Bytes
		h.Saved.SkippedCount += rep.SkippedCount
		for _, s := range rep.Skipped {
			if len(h.Saved.Skipped) < 100 {
				h.Saved.Skipped = append(h.Saved.Skipped, path.Join(treeName(t.target), s))
			}
		}
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	if len(b) > maxManifestBytes {
		return nil, fmt.Errorf("the manifest is %d bytes, over %d", len(b), maxManifestBytes)
	}
	if err := os.WriteFile(filepath.Join(tmp, manifestFile), b, 0o600); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, filepath.Join(st.dir, id)); err != nil {
		return nil, err
	}
	return h, nil
}

func treeName(target string) string {
	if target == "" {
		return "workspace"
	}
	return target
}

func newHibernationID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return "hib-" + hex.EncodeToString(b[:])
}

// Open reads hibernation id from the store. The manifest is checked as hostile
// input (bounded, well-formed, naming only its own files); the trees are checked
// when restored. Errors wrap port.ErrNotFound for an unknown id, port.ErrInvalidSpec
// for a malformed one.
func (st *HibernationStore) Open(id string) (*Hibernation, error) {
	if err := port.ValidateRunID(id); err != nil {
		return nil, port.Invalidf("hibernation id %q: %v", id, err)
	}
	dir, err := st.openDir(id)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	f, err := dir.OpenFile(manifestFile, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("hibernation %s: %w: manifest: %v", id, port.ErrInvalidSpec, err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > maxManifestBytes {
		return nil, port.Invalidf("hibernation %s: the manifest is not a regular file of at most %d bytes", id, maxManifestBytes)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return nil, err
	}
	var h Hibernation
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, port.Invalidf("hibernation %s: manifest: %v", id, err)
	}
	if h.ID != id {
		return nil, port.Invalidf("hibernation %s: the manifest names %q", id, h.ID)
	}
	if err := h.check(); err != nil {
		return nil, fmt.Errorf("hibernation %s: %w", id, err)
	}
	h.store = st
	return &h, nil
}

func (st *HibernationStore) openDir(id string) (*os.Root, error) {
	root, err := os.OpenRoot(st.dir)
	if err != nil {
		return nil, fmt.Errorf("hibernation store: %w", err)
	}
	defer root.Close()
	fi, err := root.Lstat(id)
	if err != nil {
		return nil, fmt.Errorf("hibernation %s: %w", id, port.ErrNotFound)
	}
	if !fi.IsDir() {
		return nil, port.Invalidf("hibernation %s is not a directory", id)
	}
	return root.OpenRoot(id)
}

// check validates a manifest read from a store.
func (h *Hibernation) check() error {
	if len(h.Segments) == 0 {
		return port.Invalidf("no segments")
	}
	seen := map[string]bool{}
	for _, s := range h.Segments {
		if err := port.ValidateRunID(s.RunID); err != nil {
			return port.Invalidf("segment run id: %v", err)
		}
		if seen[s.RunID] {
			return port.Invalidf("segment %s appears twice", s.RunID)
		}
		seen[s.RunID] = true
	}
	if len(h.Trees) == 0 || h.Trees[0].Target != "" {
		return port.Invalidf("no workspace tree")
	}
	files := map[string]bool{}
	for i, t := range h.Trees {
		if t.File == "" || t.File != filepath.Base(t.File) || t.File == manifestFile || files[t.File] {
			return port.Invalidf("tree file %q", t.File)
		}
		files[t.File] = true
		if len(t.SHA256) != sha256.Size*2 {
			return port.Invalidf("tree %s has no SHA-256", t.File)
		}
		if i > 0 && (!path.IsAbs(t.Target) || path.Clean(t.Target) != t.Target || t.Target != h.Mounts[i-1]) {
			return port.Invalidf("tree target %q", t.Target)
		}
	}
	if len(h.Mounts) != len(h.Trees)-1 {
		return port.Invalidf("%d mounts for %d trees", len(h.Mounts), len(h.Trees))
	}
	return nil
}

// Remove deletes the hibernation's saved state from its store.
func (h *Hibernation) Remove() error {
	if h.store == nil {
		return port.Invalidf("the hibernation has no store")
	}
	if err := port.ValidateRunID(h.ID); err != nil {
		return port.Invalidf("hibernation id %q", h.ID)
	}
	return os.RemoveAll(filepath.Join(h.store.dir, h.ID))
}

// restore restores h into the request's workspace (and declared mounts), which must
// be existing, empty directories: each tree's SHA-256 checked against the manifest,
// then its stream restored as hostile input (statearchive.Extract), owned by the
// sandbox's user.
func (h *Hibernation) restore(req Request) error {
	if h.store == nil {
		return port.Invalidf("the hibernation has no store (use HibernationStore.Open)")
	}
	uid, gid, err := parseUser(req.User)
	if err != nil {
		return err
	}
	if req.User == "" {
		uid, gid, _ = parseUser(port.DefaultUser)
	}
	if gid < 0 {
		gid = uid
	}
	dir, err := h.store.openDir(h.ID)
	if err != nil {
		return err
	}
	defer dir.Close()
	for _, t := range h.Trees {
		dst := req.WorkspaceDir
		if t.Target != "" {
			i := slices.IndexFunc(req.Mounts, func(m port.Mount) bool { return m.Target == t.Target })
			if i < 0 || !req.Mounts[i].Writable {
				return port.Invalidf("the hibernation saved mount %s: the request needs a writable mount there (an empty directory)", t.Target)
			}
			dst = req.Mounts[i].Source
		}
		if err := restoreTree(dir, t, dst, statearchive.Owner{UID: uid, GID: gid}, h.store.lim); err != nil {
			return fmt.Errorf("%s: %w", treeName(t.Target), err)
		}
	}
	return nil
}

func restoreTree(dir *os.Root, t savedTree, dst string, owner statearchive.Owner, lim StateLimits) error {
	f, err := dir.OpenFile(t.File, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return &StateError{Name: t.File, Reason: "cannot be opened: " + err.Error()}
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return &StateError{Name: t.File, Reason: "not a regular file"}
	}
	// The digest first: a stream is restored only as it was saved.
	sum := sha256.New()
	if err := digest(sum, f, lim); err != nil {
		return err
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != t.SHA256 {
		return fmt.Errorf("%w: %s hashes to %s, the manifest says %s", port.ErrDigestMismatch, t.File, got, t.SHA256)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err = statearchive.Extract(f, dst, owner, lim)
	return err
}

func digest(h hash.Hash, r io.Reader, lim StateLimits) error {
	lim = lim.WithDefaults()
	max := lim.MaxBytes + int64(lim.MaxEntries+16)*3*512 + 1<<20
	n, err := io.Copy(h, io.LimitReader(r, max+1))
	if err != nil {
		return err
	}
	if n > max {
		return &StateError{Name: "", Reason: fmt.Sprintf("a saved stream over %d bytes", max)}
	}
	return nil
}

// checkResume checks a resumed request against h before anything is restored.
func (h *Hibernation) checkResume(req Request) error {
	if h == nil {
		return port.Invalidf("no hibernation to resume")
	}
	for _, s := range h.Segments {
		if s.RunID == req.RunID {
			return port.Invalidf("run id %s is a segment of the hibernation already: each segment needs its own", req.RunID)
		}
	}
	if req.WorkspaceDir == "" {
		return port.Invalidf("a resumed request needs a workspace dir (an empty directory)")
	}
	return nil
}

// ResumeOption configures Resume and RunFrom.
type ResumeOption func(*resumeConfig) error

type resumeConfig struct {
	prepare func(workspaceDir string) error
}

// WithPrepare runs f after the saved state is restored into the request's workspace
// and before the sandbox starts: where the host writes the next turn's inputs
// (openclaw.OneShot.PrepareNext, say). An error from f stops the resume (the
// workspace keeps what was restored).
func WithPrepare(f func(workspaceDir string) error) ResumeOption {
	return func(c *resumeConfig) error {
		if f == nil {
			return port.Invalidf("WithPrepare: nil function")
		}
		c.prepare = f
		return nil
	}
}

// resume checks req against h, restores h's state and runs the prepare hook.
func (h *Hibernation) resume(req Request, opts []ResumeOption) error {
	var cfg resumeConfig
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return err
		}
	}
	if err := h.checkResume(req); err != nil {
		return err
	}
	if err := h.restore(req); err != nil {
		return fmt.Errorf("restoring %s: %w", h.ID, err)
	}
	if cfg.prepare != nil {
		if err := cfg.prepare(req.WorkspaceDir); err != nil {
			return fmt.Errorf("preparing the restored workspace: %w", err)
		}
	}
	return nil
}

// Resume starts a session from a hibernation: h's saved state is restored into
// req's workspace and the mounts h saved (each an existing, empty directory of the
// request; writable mounts for the latter), then the session starts as Start starts
// one. The session is a new segment: its own run ID (one no segment of h has), proxy,
// attribution and budget. Its Stop's Result lists h's segments and its own
// (Result.Segments), reconciling earlier segments that lack usage when req asks for
// reconciliation. Resuming one hibernation more than once forks it: each session has
// its own copy of the state.
//
// Errors: those of Start, port.ErrInvalidSpec for a request that does not fit h
// (nothing restored), a *StateError (or port.ErrDigestMismatch) for a saved state
// refused on the way back: nothing started, and the workspace and mounts emptied
// again.
func (s *Sandbox) Resume(ctx context.Context, h *Hibernation, req SessionRequest, opts ...ResumeOption) (*Session, error) {
	if err := h.resume(req.Request, opts); err != nil {
		return nil, fmt.Errorf("sandbox: resume session %s: %w", req.RunID, err)
	}
	ss, err := s.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	ss.from = h
	ss.log.Info("session resumed from hibernation", "hibernation", h.ID, "segments", len(h.Segments))
	return ss, nil
}

// RunFrom runs one sandbox from a hibernation: h's saved state is restored into
// req's workspace and mounts as Resume does, then the run goes as Run's (served by
// the Sandbox's warm or pre-booted pool where it matches). Its Result lists h's
// segments and its own (Result.Segments). A host that keeps a conversation in
// hibernation between turns saves the run's state again with SaveRun.
//
// Errors: those of Run, and those of Resume before anything runs.
func (s *Sandbox) RunFrom(ctx context.Context, h *Hibernation, req Request, opts ...ResumeOption) (*Result, error) {
	if err := h.resume(req, opts); err != nil {
		return nil, fmt.Errorf("sandbox: run %s: %w", req.RunID, err)
	}
	started := time.Now()
	res, runErr := s.Run(ctx, req)
	if res == nil {
		return nil, runErr
	}
	seg := Segment{
		RunID: req.RunID, Attempt: req.Attempt, BillingAccountID: req.Attribution.BillingAccountID,
		ResumedFrom: h.ID, Started: started, Ended: time.Now(), Audit: res.Audit, Usage: res.Usage,
	}
	if res.Run != nil {
		seg.ExitCode, seg.ErrorCode = res.Run.ExitCode, res.Run.ErrorCode
	}
	segs, err := s.segments(ctx, h, seg, req)
	res.Segments = segs
	if err != nil {
		s.logger.Warn("reconciling earlier segments failed", logattr.RunID, req.RunID, logattr.Err, err)
		runErr = errors.Join(runErr, fmt.Errorf("sandbox: run %s: %w", req.RunID, err))
	}
	return res, runErr
}

// SaveRun saves the state a finished run (res, from Run or RunFrom of req) left in
// its workspace and opts.Mounts as a new hibernation, whose segments are res's
// (Result.Segments, or the run alone): the next turn of a conversation kept in
// hibernation resumes from it. opts.Grace is unused.
func (st *HibernationStore) SaveRun(req Request, res *Result, opts HibernateOptions) (*Hibernation, error) {
	if res == nil {
		return nil, port.Invalidf("no result to save")
	}
	ss := &Session{req: SessionRequest{Request: req}}
	trees, err := ss.savedTrees(opts)
	if err != nil {
		return nil, err
	}
	segs := res.Segments
	if len(segs) == 0 {
		seg := Segment{RunID: req.RunID, Attempt: req.Attempt, BillingAccountID: req.Attribution.BillingAccountID, Ended: time.Now(), Audit: res.Audit, Usage: res.Usage}
		if res.Run != nil {
			seg.ExitCode, seg.ErrorCode = res.Run.ExitCode, res.Run.ErrorCode
			seg.Started = seg.Ended.Add(-res.Run.Duration)
		}
		segs = []Segment{seg}
	}
	return st.saveSegments(req.Image, segs, trees)
}
