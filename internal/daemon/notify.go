package daemon

import (
	"net"
	"os"
)

// Notify tells systemd (Type=notify) about a service: READY=1 once it
// serves, STOPPING=1 on the way out. Without NOTIFY_SOCKET it does
// nothing.
func Notify(state string) error {
	path := os.Getenv("NOTIFY_SOCKET")
	if path == "" {
		return nil
	}
	if path[0] == '@' { // an abstract socket
		path = "\x00" + path[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}
