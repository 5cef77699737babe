package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// serve listens on 127.0.0.1:port and answers each line with "echo:" and the line,
// forever: a long-running session's process with a port to expose.
func serve(port string) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fail(4, err.Error())
	}
	fmt.Println("listening", ln.Addr())
	for {
		c, err := ln.Accept()
		if err != nil {
			fail(4, err.Error())
		}
		go func() {
			defer c.Close()
			r := bufio.NewScanner(c)
			for r.Scan() {
				fmt.Fprintf(c, "echo:%s\n", r.Text())
			}
		}()
	}
}

// stubborn ignores SIGTERM and sleeps: only SIGKILL ends it.
func stubborn() {
	signal.Ignore(syscall.SIGTERM)
	fmt.Println("ignoring TERM")
	_ = os.Stdout.Sync()
	time.Sleep(time.Hour)
}
