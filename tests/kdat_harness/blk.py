"""kdat_blk's controllers as an administrator drives them: one is made by writing an option
string to /dev/kdat-blk (and reading back its name from the same open file), shown and tuned in
/sys/class/kdat-blk/NAME/, and removed by writing to its delete_controller."""
import os

CONTROL = "/dev/kdat-blk"
CLASS = "/sys/class/kdat-blk"


def connect(**options):
    """A new controller with these options (target=, port=, nr_queues=, ...): its name (kdatbN).
    A refusal raises the OSError the write got; the kernel log says why."""
    fd = os.open(CONTROL, os.O_RDWR)
    try:
        os.write(fd, ",".join(f"{k}={v}" for k, v in options.items()).encode())
        reply = os.read(fd, 128).decode().strip()
    finally:
        os.close(fd)
    fields = dict(field.split("=", 1) for field in reply.split(","))
    assert fields["name"] == f"kdatb{fields['instance']}", reply
    return fields["name"]


def controllers():
    return sorted(os.listdir(CLASS)) if os.path.isdir(CLASS) else []


def attr(name, attribute):
    with open(os.path.join(CLASS, name, attribute)) as f:
        return f.read().strip()


def set_attr(name, attribute, value):
    with open(os.path.join(CLASS, name, attribute), "w") as f:
        f.write(f"{value}\n")


def disconnect(name):
    set_attr(name, "delete_controller", 1)
