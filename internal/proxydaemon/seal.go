package proxydaemon

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
)

// seal encrypts v with the current sealing key (AES-256-GCM): the registry file
// alone does not give away the runs' API keys.
func (s *Server) sealSpec(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	g, err := gcm(s.seal[0])
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, g.NonceSize(), g.NonceSize()+len(b)+g.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return g.Seal(nonce, nonce, b, nil), nil
}

// unseal opens a sealed spec with the current key, then the previous one.
func (s *Server) unseal(b []byte, v any) error {
	for _, k := range s.seal {
		if k == nil {
			continue
		}
		g, err := gcm(k)
		if err != nil {
			return err
		}
		if len(b) < g.NonceSize() {
			return errors.New("sealed spec too short")
		}
		plain, err := g.Open(nil, b[:g.NonceSize()], b[g.NonceSize():], nil)
		if err == nil {
			return json.Unmarshal(plain, v)
		}
	}
	return errors.New("sealed spec does not open")
}

func gcm(key []byte) (cipher.AEAD, error) {
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(blk)
}
