package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of /proc/PID/stat's times: USER_HZ, 100 on every Linux the
// kernel's ABI allows (sysconf(_SC_CLK_TCK)).
const clockTick = 10 * time.Millisecond

// cpuOf is the user + system CPU time pid has used (its threads included).
func cpuOf(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("cpu time: %w", err)
	}
	// The command name (field 2) may hold spaces and is in parentheses: count from after it.
	rest := raw[bytes.LastIndexByte(raw, ')')+2:]
	f := strings.Fields(string(rest))
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu time: /proc/%d/stat has %d fields after the name", pid, len(f))
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64) // field 14
	stime, err2 := strconv.ParseInt(f[12], 10, 64) // field 15
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("cpu time: /proc/%d/stat: utime %q stime %q", pid, f[11], f[12])
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// memoryOf is pid's peak and current resident set (VmHWM, VmRSS) as /proc/PID/status says.
func memoryOf(pid int) (hwm, rss string, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", "", fmt.Errorf("memory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			hwm = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			rss = strings.TrimSpace(v)
		}
	}
	if hwm == "" || rss == "" {
		return "", "", fmt.Errorf("memory: no VmHWM or VmRSS in /proc/%d/status", pid)
	}
	return hwm, rss, sc.Err()
}
