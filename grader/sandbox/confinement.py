"""What the process running a submission may not do, set from inside it before any student code.

- resource limits: address space, CPU time, size of one file, open files, no core dumps;
- a seccomp filter (``confine``), the same for every submission, so that nothing one submission
  does reaches the next one graded by the same warm runner:
  - no new processes and no new threads: fork, vfork and clone fail with EPERM (clone3 with
    ENOSYS, so that libc tries clone), so a submission runs on its one thread, where the
    shortcut rule watches every call, and cannot start a background process, a fork bomb or a
    shell command;
  - nothing done to another process: no ptrace, no reading or writing its memory, no signal, no
    resource limit, priority, CPU affinity or scheduling changed, except for the process itself
    (the warm runner above it is out of reach);
  - no System V shared memory, semaphores or message queues, which would outlive the process.
- nobody of the same user may attach to the warm runner (``keep_memory_private``).

Standard library only: the runner imports this file where the grader's files are not visible.
"""

import ctypes
import errno
import os
import platform
import resource
import signal
import struct

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_SET_DUMPABLE = 4
ALLOW, KILL_PROCESS, RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
LOAD_WORD, JUMP, JUMP_EQUAL, JUMP_AT_LEAST, RETURN = 0x20, 0x05, 0x15, 0x35, 0x06
SYSCALL_NUMBER, ARCHITECTURE, FIRST_ARGUMENT = 0, 4, 16  # offsets in struct seccomp_data

# Per architecture: its audit number, the x32 bit (or None), and the system calls:
# refused outright; allowed only when their first argument names this process (0, or its pid;
# for kill also minus its pid, its own process group), and the one refused with ENOSYS.
SYSCALLS = {
    "x86_64": {
        "arch": 0xC000003E, "x32": 0x40000000,
        "refused": {"fork": 57, "vfork": 58, "clone": 56, "ptrace": 101, "process_vm_readv": 310,
                    "process_vm_writev": 311, "tkill": 200, "pidfd_open": 434,
                    "pidfd_send_signal": 424, "shmget": 29, "shmat": 30, "shmctl": 31,
                    "semget": 64, "semop": 65, "semctl": 66, "semtimedop": 220, "msgget": 68,
                    "msgsnd": 69, "msgrcv": 70, "msgctl": 71},
        "own_only": {"kill": 62, "tgkill": 234, "rt_sigqueueinfo": 129,
                     "rt_tgsigqueueinfo": 297, "prlimit64": 302, "setpriority": 141,
                     "sched_setaffinity": 203, "sched_setscheduler": 144,
                     "sched_setparam": 142, "sched_setattr": 314, "ioprio_set": 251},
        "clone3": 435},
    "aarch64": {
        "arch": 0xC00000B7, "x32": None,
        "refused": {"clone": 220, "ptrace": 117, "process_vm_readv": 270,
                    "process_vm_writev": 271, "tkill": 130, "pidfd_open": 434,
                    "pidfd_send_signal": 424, "shmget": 194, "shmat": 196, "shmctl": 195,
                    "semget": 190, "semop": 193, "semctl": 191, "semtimedop": 192,
                    "msgget": 186, "msgsnd": 189, "msgrcv": 188, "msgctl": 187},
        "own_only": {"kill": 129, "tgkill": 131, "rt_sigqueueinfo": 138,
                     "rt_tgsigqueueinfo": 240, "prlimit64": 261, "setpriority": 140,
                     "sched_setaffinity": 122, "sched_setscheduler": 119,
                     "sched_setparam": 118, "sched_setattr": 274, "ioprio_set": 30},
        "clone3": 435},
}
# which argument names the process: setpriority and ioprio_set take (which, who, ...)
WHO_ARGUMENT = {"setpriority": 1, "ioprio_set": 1}


class ConfinementError(OSError):
    """The kernel refused to confine the process: it must not run student code."""


def limit_resources(memory: int, cpu_seconds: int, file_size: int, open_files: int) -> None:
    """Kernel-enforced limits for this process (bytes, seconds, bytes, count)."""
    limits = {resource.RLIMIT_AS: (memory, memory),
              resource.RLIMIT_CPU: (cpu_seconds, cpu_seconds + 5),  # SIGXCPU, then SIGKILL
              resource.RLIMIT_FSIZE: (file_size, file_size),
              resource.RLIMIT_NOFILE: (open_files, open_files), resource.RLIMIT_CORE: (0, 0)}
    for which, (soft, hard) in limits.items():
        resource.setrlimit(which, (soft, hard))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a file too large: EFBIG, not a dead kernel


def confine() -> None:
    """Install the seccomp filter for this process (no new privileges first, as the kernel
    requires); it holds for the rest of the process's life."""
    program = _filter(platform.machine(), os.getpid())
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(program)
    fprog = struct.pack("HL", len(program) // 8, ctypes.addressof(buffer))
    for args in ((PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
                 (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0)):
        if libc.prctl(*args) != 0:
            raise ConfinementError(ctypes.get_errno(), "prctl refused to install the filter")


def keep_memory_private() -> None:
    """Nothing of the same user may attach to this process or read /proc/<pid>/mem."""
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _filter(machine: str, pid: int) -> bytes:
    """The filter for ``machine``, for the process ``pid`` (as it sees itself)."""
    if machine not in SYSCALLS:
        raise ConfinementError(errno.ENOSYS, f"no seccomp filter for the {machine} architecture")
    table = SYSCALLS[machine]
    program = [(LOAD_WORD, None, None, ARCHITECTURE),
               (JUMP_EQUAL, None, "kill", table["arch"]),
               (LOAD_WORD, None, None, SYSCALL_NUMBER)]
    if table["x32"] is not None:
        program.append((JUMP_AT_LEAST, "deny", None, table["x32"]))
    program += [(JUMP_EQUAL, "deny", None, number) for number in table["refused"].values()]
    program.append((JUMP_EQUAL, "no clone3", None, table["clone3"]))
    for name, number in table["own_only"].items():  # A holds the call's number until it matches
        own = {0, pid} | ({-pid & 0xFFFFFFFF} if name == "kill" else set())
        program += [(JUMP_EQUAL, None, f"not {name}", number),
                    (LOAD_WORD, None, None, FIRST_ARGUMENT + 8 * WHO_ARGUMENT.get(name, 0)),
                    *((JUMP_EQUAL, "allow", None, value) for value in sorted(own)),
                    (JUMP, "deny", None, 0),
                    (f"not {name}",)]
    program += [("allow", RETURN, ALLOW), ("deny", RETURN, RET_ERRNO | errno.EPERM),
                ("no clone3", RETURN, RET_ERRNO | errno.ENOSYS),  # libc falls back to clone
                ("kill", RETURN, KILL_PROCESS)]
    return _assemble(program)


def _assemble(program: list[tuple]) -> bytes:
    """Classic BPF, from instructions (op, jump-if-true label, jump-if-false label, k) and
    labels: (name,) alone, or (name, RETURN, value) on a return instruction. Jumps go forward
    only; an unconditional JUMP takes its label as the first one."""
    at, index = {}, 0
    for item in program:
        if isinstance(item[0], str):
            at[item[0]] = index
        index += len(item) != 1  # a bare label is no instruction
    code, index = b"", 0
    for item in program:
        if len(item) == 1:
            continue
        if isinstance(item[0], str):  # a labelled return
            code += struct.pack("HBBI", item[1], 0, 0, item[2])
        else:
            op, if_true, if_false, k = item
            offset = {None: 0} | {name: where - index - 1 for name, where in at.items()}
            if op == JUMP:
                code += struct.pack("HBBI", op, 0, 0, offset[if_true])
            else:
                code += struct.pack("HBBI", op, offset[if_true], offset[if_false], k)
        index += 1
    return code
