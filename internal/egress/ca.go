package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/agentsandbox/sandbox/internal/selfca"
)

// CA is a run's certificate authority, made in memory for the run: its key never
// leaves the process, only its certificate goes into the sandbox. Leaf certificates
// are made on first use per host and cached for the run.
type CA struct {
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	pem      []byte
	notAfter time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// maxLeaves bounds a run's cached leaf certificates (a policy names few hosts).
const maxLeaves = 1024

// NewCA makes a CA valid from an hour ago for validity (name constraints are not
// used: the policy, not the certificate, decides which hosts are served).
func NewCA(runID string, validity time.Duration) (*CA, error) {
	now := time.Now()
	cert, der, key, err := selfca.New(&x509.Certificate{
		SerialNumber:   serial(),
		Subject:        pkix.Name{CommonName: "agentsandbox egress CA " + clip(runID, 32), Organization: []string{"agentsandbox"}},
		NotBefore:      now.Add(-time.Hour),
		NotAfter:       now.Add(validity),
		MaxPathLenZero: true,
	})
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, notAfter: now.Add(validity), leaves: map[string]*tls.Certificate{},
		pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// PEM is the CA certificate (never the key).
func (c *CA) PEM() []byte { return append([]byte(nil), c.pem...) }

// Certificate is the CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Leaf returns a certificate for host (a normalised name), made once per run.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok {
		return l, nil
	}
	if len(c.leaves) >= maxLeaves {
		return nil, fmt.Errorf("egress: too many hosts for one run")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     c.notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	c.leaves[host] = l
	return l, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return big.NewInt(time.Now().UnixNano())
	}
	return n
}

func clip(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
