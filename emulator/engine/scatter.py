"""Access rows sorted out by device in compiled code: a counting sort, one pass per batch.

A multi-device trace interleaves its devices' rows; each device's replay wants its own rows, in
order, with op and tensor ids local to the device. :func:`scatter_rows` writes one batch's rows
into per-device runs of whole output columns, given where each device's next row goes; the caller
counts every device's rows first (``np.bincount`` of the op's device) to lay the runs out.
"""

from __future__ import annotations

from tierlab.engine.jit import njit


@njit(nogil=True)
def scatter_rows(op, tid, offset, nbytes, count, stride, write, op_dev, t_dev, op_local, t_local,
                 at, out_op, out_tid, out_offset, out_nbytes, out_count, out_stride, out_write, foreign):
    """Row ``i`` goes to ``at[d]`` (then ``at[d] += 1``) of the output columns, ``d`` its op's
    device, with its op and tensor ids made local (``op_local``, ``t_local``); ``foreign[d]`` is set
    where a row of device ``d`` reaches another device's tensor."""
    for i in range(op.shape[0]):
        o = op[i]
        t = tid[i]
        d = op_dev[o]
        if t_dev[t] != d:
            foreign[d] = True
        j = at[d]
        at[d] = j + 1
        out_op[j] = op_local[o]
        out_tid[j] = t_local[t]
        out_offset[j] = offset[i]
        out_nbytes[j] = nbytes[i]
        out_count[j] = count[i]
        out_stride[j] = stride[i]
        out_write[j] = write[i]
