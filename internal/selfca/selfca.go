// Package selfca makes self-signed CA certificates: the egress front's per-run CA
// and the local Kubernetes cluster's.
package selfca

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
)

// New makes a P-256 key and a CA certificate from tmpl signed by that key. It sets
// tmpl's key usage (certificate and digital signature), basic constraints and IsCA;
// the caller sets the serial, subject, validity and any path length limit. It
// returns the certificate, its DER encoding and the key.
func New(tmpl *x509.Certificate) (*x509.Certificate, []byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	tmpl.IsCA = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, nil, err
	}
	return cert, der, key, nil
}
