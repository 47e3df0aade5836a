"""records.py — how the script tests write sample records for `piperec
infer` and `piperec process`: length-delimited bodies (an unsigned varint
length, then the bytes: what both read for Avro and Protobuf files), and a
Protobuf message class from a descriptor set, on protobuf 3 and 4 alike.

    sys.path.insert(0, os.path.join(os.environ["PR_SOURCE_DIR"], "tests", "config"))
    import records
"""
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7f | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def write_delimited(path, bodies):
    """Each body (bytes) behind its length."""
    with open(path, "wb") as out:
        for b in bodies:
            out.write(uvarint(len(b)) + b)


def message_class(descriptor_set, name):
    """The class of message `name` ("pkg.Msg") of a FileDescriptorSet file."""
    fds = descriptor_pb2.FileDescriptorSet()
    fds.ParseFromString(open(descriptor_set, "rb").read())
    pool = descriptor_pool.DescriptorPool()
    for f in fds.file:
        pool.Add(f)
    desc = pool.FindMessageTypeByName(name)
    try:
        return message_factory.GetMessageClass(desc)
    except AttributeError:  # protobuf 3
        return message_factory.MessageFactory(pool).GetPrototype(desc)
