"""What the process running a submission may not do, set from inside it before any student code.

- resource limits: address space, CPU time, size of one file, open files, no core dumps;
- no new processes: a seccomp filter makes fork, vfork and clone (but for threads) fail with
  EPERM, so a submission cannot start a background process, a fork bomb or a shell command;
- no ptrace and no reading or writing another process's memory (the warm runner's included).

Standard library only: the runner imports this file where the grader's files are not visible.
"""

import ctypes
import errno
import platform
import resource
import signal
import struct

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
PR_SET_DUMPABLE = 4
CLONE_THREAD = 0x00010000
ALLOW, KILL_PROCESS, RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
LOAD_WORD, JUMP_EQUAL, JUMP_AT_LEAST, JUMP_ANY_BIT, RETURN = 0x20, 0x15, 0x35, 0x45, 0x06
SYSCALL_NUMBER, ARCHITECTURE, FIRST_ARGUMENT = 0, 4, 16  # offsets in struct seccomp_data

# per architecture: audit arch, x32 bit (or None), forbidden syscalls, clone, clone3
SYSCALLS = {
    "x86_64": (0xC000003E, 0x40000000,
               {"fork": 57, "vfork": 58, "ptrace": 101, "process_vm_readv": 310,
                "process_vm_writev": 311}, 56, 435),
    "aarch64": (0xC00000B7, None,
                {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271}, 220, 435),
}


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


def forbid_new_processes() -> None:
    """Install the seccomp filter (no new privileges first, as the kernel requires)."""
    program = _filter(platform.machine())
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


def _filter(machine: str) -> bytes:
    if machine not in SYSCALLS:
        raise ConfinementError(errno.ENOSYS, f"no seccomp filter for the {machine} architecture")
    arch, x32_bit, forbidden, clone, clone3 = SYSCALLS[machine]
    deny, allow = RET_ERRNO | errno.EPERM, ALLOW
    # (code, jump-if-true label, jump-if-false label, k); labels resolve to relative offsets
    program = [(LOAD_WORD, None, None, ARCHITECTURE),
               (JUMP_EQUAL, None, "kill", arch),
               (LOAD_WORD, None, None, SYSCALL_NUMBER)]
    if x32_bit is not None:
        program.append((JUMP_AT_LEAST, "deny", None, x32_bit))
    program += [(JUMP_EQUAL, "deny", None, number) for number in forbidden.values()]
    program += [(JUMP_EQUAL, "no clone3", None, clone3),
                (JUMP_EQUAL, None, "allow", clone),
                (LOAD_WORD, None, None, FIRST_ARGUMENT),  # clone's flags (low 32 bits)
                (JUMP_ANY_BIT, "allow", "deny", CLONE_THREAD),
                ("allow", RETURN, allow), ("deny", RETURN, deny),
                ("no clone3", RETURN, RET_ERRNO | errno.ENOSYS),  # libc falls back to clone
                ("kill", RETURN, KILL_PROCESS)]
    return _assemble(program)


def _assemble(program: list[tuple]) -> bytes:
    """Classic BPF: labelled return instructions at the end, jumps resolved to offsets."""
    labels = {item[0]: index for index, item in enumerate(program) if isinstance(item[0], str)}
    code = b""
    for index, item in enumerate(program):
        if isinstance(item[0], str):
            code += struct.pack("HBBI", item[1], 0, 0, item[2])
            continue
        op, if_true, if_false, k = item
        offset = {None: 0} | {name: where - index - 1 for name, where in labels.items()}
        code += struct.pack("HBBI", op, offset[if_true], offset[if_false], k)
    return code
