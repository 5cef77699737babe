package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/litellm"
	"github.com/agentsandbox/sandbox/port"
	"github.com/agentsandbox/sandbox/proxypolicy"
)

// The proxies' virtual key, as Open mints it: one per LiteLLM, master key and owner
// in this process, shared by the Sandboxes of that owner and deleted by the last
// Close. It may call only the routes the proxies forward (proxypolicy.KeyRoutes),
// so a leaked key reaches no admin API, and it expires (keyLifetime): a process
// that dies without Close leaves a key that stops working on its own.

// keyLifetime is how long a minted key lives; a key is renewed (a new one minted,
// the old one deleted at the last Close) when a run could outlive what is left.
const keyLifetime = 24 * time.Hour

// keyAliasPrefix starts the LiteLLM alias of the keys Open mints; the owner
// follows.
const keyAliasPrefix = "agentsandbox-"

var (
	keysMu sync.Mutex
	keys   = map[string]*sharedKey{}
)

// sharedKey is one owner's key and the Sandboxes using it.
type sharedKey struct {
	id    string // the keys map's key
	lc    *litellm.Client
	owner string
	refs  int

	mu      sync.Mutex
	key     *litellm.Key
	retired []string // renewed keys, deleted with the last release
}

// keyLease is one Sandbox's use of a sharedKey.
type keyLease struct {
	k    *sharedKey
	once sync.Once
}

// acquireKey returns a lease on the owner's key at this LiteLLM, minting it when no
// Sandbox of this process holds one.
func acquireKey(ctx context.Context, lc *litellm.Client, cfg *liteLLMConfig, owner string) (*keyLease, error) {
	h := sha256.Sum256([]byte(cfg.url + "\x00" + cfg.masterKey + "\x00" + owner))
	id := hex.EncodeToString(h[:])
	keysMu.Lock()
	defer keysMu.Unlock()
	if k, ok := keys[id]; ok {
		k.refs++
		return &keyLease{k: k}, nil
	}
	k := &sharedKey{id: id, lc: lc, owner: owner, refs: 1}
	var err error
	if k.key, err = k.mint(ctx, keyLifetime); err != nil {
		return nil, fmt.Errorf("minting the proxies' virtual key at LiteLLM %s: %w", cfg.url, keyHint(err))
	}
	keys[id] = k
	return &keyLease{k: k}, nil
}

// keyHint adds what to do to a failed key creation.
func keyHint(err error) error {
	switch {
	case errors.Is(err, port.ErrUnavailable):
		return fmt.Errorf("%w (is LiteLLM running at LITELLM_URL?)", err)
	case errors.Is(err, litellm.ErrUnauthorized):
		return fmt.Errorf("%w (LITELLM_MASTER_KEY must be a key that may create keys: LiteLLM's master key or an admin's)", err)
	}
	return fmt.Errorf("%w (LiteLLM's /key/generate needs its database)", err)
}

func (k *sharedKey) mint(ctx context.Context, life time.Duration) (*litellm.Key, error) {
	return k.lc.GenerateKey(ctx, litellm.KeyRequest{
		KeyAlias:      keyAliasPrefix + k.owner,
		Duration:      fmt.Sprintf("%ds", int(life.Seconds())),
		AllowedRoutes: proxypolicy.KeyRoutes(),
		Metadata:      map[string]any{"agentsandbox_owner": k.owner, "minted_by": "sandbox.Open"},
	})
}

// current is the key now, for the first LLM (Open's).
func (l *keyLease) current() string {
	l.k.mu.Lock()
	defer l.k.mu.Unlock()
	return l.k.key.Key
}

// forRun returns a key valid for at least need more, renewing it when the current
// one expires sooner: the run's proxy holds the key it started with.
func (l *keyLease) forRun(ctx context.Context, need time.Duration) (string, error) {
	k := l.k
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.key.Expires.IsZero() || time.Until(k.key.Expires) > need {
		return k.key.Key, nil
	}
	nk, err := k.mint(ctx, max(keyLifetime, need+time.Hour))
	if err != nil {
		return "", fmt.Errorf("renewing the proxies' virtual key: %w", keyHint(err))
	}
	k.retired = append(k.retired, k.key.Key)
	k.key = nk
	return nk.Key, nil
}

// release ends the lease; the last one deletes the keys at LiteLLM.
func (l *keyLease) release() error {
	var err error
	l.once.Do(func() {
		k := l.k
		keysMu.Lock()
		k.refs--
		last := k.refs == 0
		if last {
			delete(keys, k.id)
		}
		keysMu.Unlock()
		if !last {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		k.mu.Lock()
		all := append(k.retired, k.key.Key)
		k.mu.Unlock()
		if derr := k.lc.DeleteKeys(ctx, all...); derr != nil {
			err = fmt.Errorf("deleting the proxies' virtual key (it expires by itself at %s): %w", k.key.Expires.Format(time.RFC3339), derr)
		}
	})
	return err
}
