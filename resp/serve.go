package resp

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/tidwall/redcon"
)

// Serve accepts connections on ln and serves their commands as
// redcon.Serve does — the same handler, accept and closed callbacks, and
// connections that are redcon.Conns (pipelines, Detach) — except that a
// connection holds no buffers between commands. redcon gives each
// connection two 4 KB read buffers for its whole life: 80 MB for 10,000
// clients blocked in BRPOP, most of an idle node's memory. Here a
// connection reads into a buffer shared through a pool, keeps only the
// bytes of the commands it read (until they are served) and of a command
// not yet complete, and gives its reply buffer back once it is flushed.
//
// Serve returns nil once ln is closed; closing the connections is the
// caller's (its accept callback knows them).
func Serve(ln net.Listener, handler func(redcon.Conn, redcon.Command),
	accept func(redcon.Conn) bool, closed func(redcon.Conn, error)) error {
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			// Out of file descriptors, say: wait a little for some to
			// close rather than spin.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := &conn{nc: nc, addr: nc.RemoteAddr().String()}
		if accept != nil && !accept(c) {
			c.Close()
			continue
		}
		go c.serve(handler, closed)
	}
}

// errDetached is what the closed callback gets for a connection handed to
// its own loop by Detach (the error redcon gives, by the same text).
var errDetached = errors.New("detached")

const (
	// readSize is the pooled buffer a connection reads the rest of a
	// command into, when what it read so far did not complete one.
	readSize = 16 << 10
	// smallRead is the connection's own buffer, that the first read of a
	// command waits in: a command of the hot path fits, and a connection
	// waiting for its next command holds no pooled buffer.
	smallRead = 512
	// keepOut is the largest reply buffer given back to the pool.
	keepOut = 64 << 10
)

var (
	readBufs = sync.Pool{New: func() any { b := make([]byte, readSize); return &b }}
	outBufs  = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}
)

// conn is one client connection: a redcon.Conn.
type conn struct {
	nc   net.Conn
	addr string
	ctx  any
	// cmds are the commands read and not yet served; partial is the start
	// of a command not yet complete.
	cmds    []redcon.Command
	partial []byte
	// out holds the replies not yet flushed, in outp's array from the
	// pool (both nil while there are none); werr is the first write error.
	out  []byte
	outp *[]byte
	werr error
	// rerr is a read error AwaitPipeline met, for the serve loop's next
	// read.
	rerr     error
	detached bool
	closed   bool
	small    [smallRead]byte
}

// serve reads and serves the connection's commands until it closes, fails
// or is detached, flushing the replies to each read's commands together.
func (c *conn) serve(handler func(redcon.Conn, redcon.Command), closed func(redcon.Conn, error)) {
	err := c.loop(handler)
	if err != errDetached {
		c.nc.Close()
	}
	if closed != nil {
		if err == io.EOF {
			err = nil
		}
		closed(c, err)
	}
}

func (c *conn) loop(handler func(redcon.Conn, redcon.Command)) error {
	for {
		if err := c.read(&c.cmds); err != nil {
			var perr protocolError
			if errors.As(err, &perr) {
				c.WriteError("ERR " + err.Error())
				c.flush()
			}
			return err
		}
		for len(c.cmds) > 0 {
			cmd := c.cmds[0]
			c.cmds[0] = redcon.Command{}
			c.cmds = c.cmds[1:]
			if len(c.cmds) == 0 {
				c.cmds = nil
			}
			handler(c, cmd)
		}
		if c.detached {
			return errDetached
		}
		if c.closed {
			return nil
		}
		if err := c.flush(); err != nil {
			return err
		}
	}
}

// protocolError is a frame the parser refused.
type protocolError struct{ error }

// read reads until at least one command is complete, and adds the
// commands read to cmds: the connection's own, or after Detach the
// detached connection's (the serve loop may still look at its own).
func (c *conn) read(cmds *[]redcon.Command) error {
	for len(*cmds) == 0 {
		if c.rerr != nil {
			return c.rerr
		}
		// The start of a command is awaited in the small buffer; the rest
		// of one that did not fit is read into a pooled one.
		buf, bp := c.small[:], (*[]byte)(nil)
		if len(c.partial) > 0 {
			bp = readBufs.Get().(*[]byte)
			buf = *bp
		}
		n, err := c.nc.Read(buf)
		if n > 0 {
			// A copy of just what arrived: the commands' arguments point
			// into it, and it is garbage once they are served.
			c.partial = append(c.partial, buf[:n]...)
		}
		if bp != nil {
			readBufs.Put(bp)
		}
		if n > 0 {
			if err := c.parse(cmds); err != nil {
				return protocolError{err}
			}
		}
		if err != nil && len(*cmds) == 0 {
			return err
		}
	}
	return nil
}

// parse takes the complete commands off the front of c.partial.
func (c *conn) parse(cmds *[]redcon.Command) error {
	b := c.partial
	// The commands' argument lists share one array while it lasts: a small
	// one first (most reads hold one command), larger ones for a pipeline.
	var slab [][]byte
	for len(b) > 0 {
		if cap(slab)-len(slab) < 4 {
			slab = make([][]byte, 0, min(8+4*cap(slab), 64))
		}
		complete, args, rest, err := nextCommand(b, slab[len(slab):])
		if err != nil {
			return err
		}
		if !complete {
			break
		}
		if len(args) > 0 { // an empty inline line is no command
			if cap(args) == cap(slab)-len(slab) {
				slab = slab[:len(slab)+len(args)]
			}
			args = args[:len(args):len(args)]
			*cmds = append(*cmds, redcon.Command{Raw: b[:len(b)-len(rest)], Args: args})
		}
		b = rest
	}
	if len(b) == 0 {
		b = nil
	}
	c.partial = b
	return nil
}

// nextCommand reads one command off b with redcon's parser. A line that
// does not start with '*' is an inline command, as for Redis and redcon's
// own reader (redcon's parser would read one starting with '$' in another
// protocol).
func nextCommand(b []byte, argsbuf [][]byte) (complete bool, args [][]byte, rest []byte, err error) {
	if b[0] != '$' {
		complete, args, _, rest, err = redcon.ReadNextCommand(b, argsbuf)
		return complete, args, rest, err
	}
	// Leading spaces are skipped by the inline parser.
	spaced := append([]byte{' '}, b...)
	complete, args, _, rest, err = redcon.ReadNextCommand(spaced, argsbuf)
	return complete, args, b[len(b)-len(rest):], err
}

// flush writes the pending replies and gives their buffer back.
func (c *conn) flush() error {
	if len(c.out) > 0 && c.werr == nil {
		if g, ok := c.nc.(*GuardedConn); ok {
			// A client that stopped reading is closed once its replies
			// have waited the limit; a write error ends the connection.
			g.SetWriteDeadline(time.Now().Add(g.replyTimeout()))
		}
		_, c.werr = c.nc.Write(c.out)
	}
	if c.outp != nil {
		if cap(c.out) <= keepOut {
			*c.outp = c.out[:0]
			outBufs.Put(c.outp)
		}
		c.out, c.outp = nil, nil
	}
	return c.werr
}

// Flush writes the replies of the commands served so far, before the end
// of their read: a blocking command sends those pipelined before it first.
func (c *conn) Flush() error { return c.flush() }

// buf returns the reply buffer to append to.
func (c *conn) buf() []byte {
	if c.outp == nil {
		c.outp = outBufs.Get().(*[]byte)
		c.out = (*c.outp)[:0]
	}
	return c.out
}

func (c *conn) RemoteAddr() string             { return c.addr }
func (c *conn) Context() any                   { return c.ctx }
func (c *conn) SetContext(v any)               { c.ctx = v }
func (c *conn) SetReadBuffer(int)              {}
func (c *conn) NetConn() net.Conn              { return c.nc }
func (c *conn) PeekPipeline() []redcon.Command { return c.cmds }

func (c *conn) ReadPipeline() []redcon.Command {
	cmds := c.cmds
	c.cmds = nil
	return cmds
}

// TakePipeline removes the first n of the commands PeekPipeline shows and
// returns them: a handler serving a pipeline in runs takes a command at a
// time, and leaves the rest to the serve loop where its run ends.
func (c *conn) TakePipeline(n int) []redcon.Command {
	n = min(n, len(c.cmds))
	taken := c.cmds[:n:n]
	if c.cmds = c.cmds[n:]; len(c.cmds) == 0 {
		c.cmds = nil
	}
	return taken
}

// AwaitPipeline reads more of the pipeline while the commands taken from
// it are being served: it returns true as soon as another command has
// arrived, false once done is closed first — a client that waits for its
// replies before sending more gets them when they are ready, not later.
// A read error is kept for the serve loop's next read.
func (c *conn) AwaitPipeline(done <-chan struct{}) bool {
	if len(c.cmds) > 0 {
		return true
	}
	if c.rerr != nil {
		return false
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-done:
			c.nc.SetReadDeadline(time.Unix(1, 0)) // ends the read at once
		case <-stop:
		}
	}()
	err := c.read(&c.cmds)
	close(stop)
	<-stopped
	if g, ok := c.nc.(*GuardedConn); ok {
		g.mu.Lock()
		g.restoreDeadline()
		g.mu.Unlock()
	} else {
		c.nc.SetReadDeadline(time.Time{})
	}
	if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		c.rerr = err
	}
	return len(c.cmds) > 0
}

func (c *conn) Close() error {
	c.flush()
	c.closed = true
	return c.nc.Close()
}

func (c *conn) WriteError(msg string)       { c.out = redcon.AppendError(c.buf(), msg) }
func (c *conn) WriteString(str string)      { c.out = redcon.AppendString(c.buf(), str) }
func (c *conn) WriteBulk(bulk []byte)       { c.out = redcon.AppendBulk(c.buf(), bulk) }
func (c *conn) WriteBulkString(bulk string) { c.out = redcon.AppendBulkString(c.buf(), bulk) }
func (c *conn) WriteInt(num int)            { c.out = redcon.AppendInt(c.buf(), int64(num)) }
func (c *conn) WriteInt64(num int64)        { c.out = redcon.AppendInt(c.buf(), num) }
func (c *conn) WriteUint64(num uint64)      { c.out = redcon.AppendUint(c.buf(), num) }
func (c *conn) WriteArray(count int)        { c.out = redcon.AppendArray(c.buf(), count) }
func (c *conn) WriteNull()                  { c.out = redcon.AppendNull(c.buf()) }
func (c *conn) WriteRaw(data []byte)        { c.out = append(c.buf(), data...) }
func (c *conn) WriteAny(v any)              { c.out = redcon.AppendAny(c.buf(), v) }

// Detach hands the connection to the caller's own loop: Serve stops
// reading it, and no longer closes it.
func (c *conn) Detach() redcon.DetachedConn {
	c.detached = true
	cmds := c.cmds
	c.cmds = nil
	return &detachedConn{conn: c, cmds: cmds}
}

type detachedConn struct {
	*conn
	cmds []redcon.Command
}

func (dc *detachedConn) Flush() error { return dc.conn.flush() }

// ReadCommand returns the next command: those read before the Detach
// first.
func (dc *detachedConn) ReadCommand() (redcon.Command, error) {
	if len(dc.cmds) == 0 {
		if err := dc.conn.read(&dc.cmds); err != nil {
			return redcon.Command{}, err
		}
	}
	cmd := dc.cmds[0]
	dc.cmds = dc.cmds[1:]
	return cmd, nil
}
