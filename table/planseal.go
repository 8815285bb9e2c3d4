package table

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
)

// A plan file is sealed whole: its last member, plan_seal, is a MAC under
// the host's key (a Sealer) of every byte before it, so that nothing apply
// acts on (the config, the diff it is held to, the base, the director
// config, the carried rows) can be edited after review, however
// consistently. The file holds no key; whoever can edit it cannot seal it.

const (
	planSealOpen  = ",\n  \"plan_seal\": \""
	planSealClose = "\"\n}"
	planSealLabel = "director plan v1"
)

// planSeal is the MAC of a plan file's bytes before its seal, in hex.
func (k Sealer) planSeal(body []byte) string {
	m := hmac.New(sha256.New, k)
	m.Write([]byte(planSealLabel))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// SealPlanFile is a plan file, the JSON object b (ending in "\n}"), with
// its seal added as its last member.
func (k Sealer) SealPlanFile(b []byte) ([]byte, error) {
	if len(k) == 0 {
		return nil, errors.New("no key to seal it with")
	}
	body, ok := bytes.CutSuffix(b, []byte("\n}"))
	if !ok {
		return nil, errors.New("not a plan object")
	}
	out := append(bytes.Clone(body), planSealOpen...)
	out = append(out, k.planSeal(body)...)
	return append(out, planSealClose+"\n"...), nil
}

// CheckPlanFile returns nil if data is a plan file sealed with k, and
// else why not.
func (k Sealer) CheckPlanFile(data []byte) error {
	if len(k) == 0 {
		return errors.New("this host has no plan key to check its seal with")
	}
	rest, ok := bytes.CutSuffix(bytes.TrimRight(data, " \t\r\n"), []byte(planSealClose))
	i := bytes.LastIndex(rest, []byte(planSealOpen))
	if !ok || i < 0 {
		return errors.New("the plan is not sealed (made by an older director, or its seal removed)")
	}
	body, seal := rest[:i], rest[i+len(planSealOpen):]
	if !hmac.Equal(seal, []byte(k.planSeal(body))) {
		return errors.New("the plan's seal does not check out: the file was edited after it was made, or it was made on another host or before this host's last reboot")
	}
	return nil
}
