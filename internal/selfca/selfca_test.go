package selfca

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"
)

func TestNewIsASelfSignedCA(t *testing.T) {
	now := time.Now()
	cert, der, key, err := New(&x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), MaxPathLenZero: true})
	if err != nil {
		t.Fatal(err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage != x509.KeyUsageCertSign|x509.KeyUsageDigitalSignature {
		t.Errorf("not a CA: IsCA %v, constraints %v, usage %v", cert.IsCA, cert.BasicConstraintsValid, cert.KeyUsage)
	}
	if cert.Subject.CommonName != "test ca" || cert.SerialNumber.Int64() != 7 || cert.MaxPathLen != 0 || !cert.MaxPathLenZero {
		t.Errorf("the template's fields are lost: %v %v %d %v", cert.Subject, cert.SerialNumber, cert.MaxPathLen, cert.MaxPathLenZero)
	}
	if err := cert.CheckSignatureFrom(cert); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) || string(der) != string(cert.Raw) {
		t.Error("the key or the DER is not the certificate's")
	}
}
