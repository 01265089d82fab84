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

// ioCounts are a process's write syscalls and the bytes they wrote (/proc/PID/io: syscw,
// wchar).
type ioCounts struct{ writes, bytes int64 }

// ioOf is pid's write syscalls and bytes so far (/proc/PID/io): for the gateway on SQLite,
// two writes a WAL frame (its header, its page) and the frames' bytes.
func ioOf(pid int) (ioCounts, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return ioCounts{}, fmt.Errorf("io: %w", err)
	}
	var c ioCounts
	for line := range strings.Lines(string(raw)) {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ": ")
		dst := map[string]*int64{"syscw": &c.writes, "wchar": &c.bytes}[name]
		if dst == nil {
			continue
		}
		if *dst, err = strconv.ParseInt(v, 10, 64); err != nil {
			return ioCounts{}, fmt.Errorf("io: /proc/%d/io %s %q", pid, name, v)
		}
	}
	return c, nil
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

// machineCPU is the first line of /proc/stat: the whole machine's CPU time, in ticks.
type machineCPU struct {
	total, idle, steal int64 // idle includes iowait
}

// machineNow reads /proc/stat's aggregate "cpu" line.
func machineNow() (machineCPU, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, fmt.Errorf("machine cpu: %w", err)
	}
	line, _, _ := bytes.Cut(raw, []byte("\n"))
	f := strings.Fields(string(line))
	// cpu user nice system idle iowait irq softirq steal [guest guest_nice: inside user]
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("machine cpu: /proc/stat begins %q", line)
	}
	var m machineCPU
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("machine cpu: /proc/stat field %d %q", i+2, v)
		}
		m.total += n
		switch i {
		case 3, 4:
			m.idle += n
		case 7:
			m.steal += n
		}
	}
	return m, nil
}

func (m machineCPU) minus(o machineCPU) machineCPU {
	return machineCPU{m.total - o.total, m.idle - o.idle, m.steal - o.steal}
}

// String is the share of the machine's CPU time that was busy, and stolen by the hypervisor:
// a busy machine near 100 % means the target is bound by the CPU the processes share.
func (m machineCPU) String() string {
	if m.total <= 0 {
		return "—"
	}
	busy := m.total - m.idle - m.steal
	return fmt.Sprintf("%.0f %% (steal %.0f %%)", 100*float64(busy)/float64(m.total), 100*float64(m.steal)/float64(m.total))
}
