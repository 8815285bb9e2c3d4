package loader

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/director/director/bpf/abi"
	"github.com/director/director/loader/mapimage"
	"github.com/director/director/table"
)

// writeQUIC writes t's QUIC-LB configs for slot, which no packet reads
// while it is written, and deletes the slot's entries of configs t has not
// (a table that had them before), so that quic_ids and quic_keys hold what
// the tables live use.
func (d *Director) writeQUIC(slot int, t *table.Table, stat []uint8) error {
	imgs, err := mapimage.EncodeQUIC(t, stat)
	if err != nil {
		return err
	}
	var ids, keys [abi.QUICConfigs]bool
	for _, img := range imgs {
		k := abi.QUICKey(slot, img.Config)
		if img.Key != nil {
			if err := d.Maps.QuicKeys.Put(k, img.Key); err != nil {
				return fmt.Errorf("writing the key of QUIC config %d: %w", img.Config, err)
			}
			keys[img.Config] = true
		}
		if err := d.Maps.QuicIds.Put(k, img.IDs); err != nil {
			return fmt.Errorf("writing the server IDs of QUIC config %d: %w", img.Config, err)
		}
		ids[img.Config] = true
	}
	for c := uint8(0); c < table.MaxQUICConfigID+1; c++ {
		k := abi.QUICKey(slot, c)
		if !ids[c] {
			if err := d.Maps.QuicIds.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("deleting QUIC config %d: %w", c, err)
			}
		}
		if !keys[c] {
			if err := d.Maps.QuicKeys.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("deleting the key of QUIC config %d: %w", c, err)
			}
		}
	}
	return nil
}

// readQUIC reads the QUIC-LB configs of slot that its table's
// quic_configs names.
func (d *Director) readQUIC(slot int, configs uint8) ([]mapimage.QUICImage, error) {
	var imgs []mapimage.QUICImage
	for c := uint8(0); c < table.MaxQUICConfigID+1; c++ {
		if configs&(1<<c) == 0 {
			continue
		}
		k := abi.QUICKey(slot, c)
		img := mapimage.QUICImage{Config: c, IDs: new(abi.QUICTable)}
		if err := d.Maps.QuicIds.Lookup(k, img.IDs); err != nil {
			return nil, fmt.Errorf("QUIC config %d: %w", c, err)
		}
		if img.IDs.Enc != 0 {
			img.Key = new(abi.AESKey)
			if err := d.Maps.QuicKeys.Lookup(k, img.Key); err != nil {
				return nil, fmt.Errorf("QUIC config %d's key: %w", c, err)
			}
		}
		imgs = append(imgs, img)
	}
	if configs>>(table.MaxQUICConfigID+1) != 0 {
		return nil, fmt.Errorf("corrupt table: QUIC configs %#x", configs)
	}
	return imgs, nil
}

// sameQUIC reports whether a and b hold the same bytes.
func sameQUIC(a, b []mapimage.QUICImage) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Config != b[i].Config || !bytes.Equal(rawBytes(a[i].IDs), rawBytes(b[i].IDs)) ||
			(a[i].Key == nil) != (b[i].Key == nil) || (a[i].Key != nil && !bytes.Equal(rawBytes(a[i].Key), rawBytes(b[i].Key))) {
			return false
		}
	}
	return true
}
