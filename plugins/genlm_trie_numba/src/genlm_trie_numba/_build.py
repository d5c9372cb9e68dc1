"""Build a token trie as flat arrays, in genlm-backend's node numbering (docs/tries.md).

The compiled builder of [`TrieArrays`][genlm_core.trie.arrays.TrieArrays] (the layout is the
core's) and the schedule of the mass kernels, [`MassPlan`][].
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from genlm_core.trie.arrays import TrieArrays


@dataclass(frozen=True)
class MassPlan:
    """The schedule of the mass kernels (docs/tries.md).

    A *source* is a leaf or a branch node (an inner node without exactly one child); a
    chain of single-child nodes shares the mass of its bottom node's source.

    Attributes:
        token_src: Source index (into the scratch) of each token's leaf (int32).
        branch: Source indices of the branch nodes, children first (int32).
        branch_ptr: CSR row pointers (int64) into ``branch_src``.
        branch_src: For each branch node, the source indices of its children.
        node_src: Source index of every node (int32).
        num_sources: Size of the scratch array.
    """

    token_src: np.ndarray
    branch: np.ndarray
    branch_ptr: np.ndarray
    branch_src: np.ndarray
    node_src: np.ndarray
    num_sources: int


@numba.njit(cache=True, nogil=True)
def _pack(codes, offsets, word, level, per, bits):  # pragma: no cover - compiled
    """Chunk ``level`` of a word as one integer key (codes + 1, zero padded)."""
    s = offsets[word] + level * per
    e = offsets[word + 1]
    key = 0
    for j in range(per):
        key <<= bits
        if s + j < e:
            key |= codes[s + j] + 1
    return key


@numba.njit(cache=True, nogil=True)
def _sort_words(codes, offsets, bits, per):  # pragma: no cover - compiled
    """Stable lexicographic argsort of the words.

    Words are compared ``per`` codes at a time, packed into one integer (a code
    ``c`` is stored as ``c + 1`` so a shorter word sorts first); runs that still tie
    and have longer words are refined on the next chunk.
    """
    n = offsets.shape[0] - 1
    order = np.arange(n)
    # Work list of runs (lo, hi, level) that tie on every chunk before `level`.
    todo = [(0, n, 0)]
    while len(todo) > 0:
        lo, hi, level = todo.pop()
        longest = 0
        for k in range(lo, hi):
            w = order[k]
            longest = max(longest, offsets[w + 1] - offsets[w])
        if longest <= level * per:
            continue  # identical words: keep them in vocabulary order
        seg = order[lo:hi].copy()
        sub = np.empty(hi - lo, np.int64)
        for k in range(hi - lo):
            sub[k] = _pack(codes, offsets, seg[k], level, per, bits)
        perm = np.argsort(sub, kind="mergesort")
        for k in range(hi - lo):
            order[lo + k] = seg[perm[k]]
        sub = sub[perm]
        a = 0
        while a < hi - lo:
            b = a + 1
            while b < hi - lo and sub[b] == sub[a]:
                b += 1
            if b - a > 1:
                todo.append((lo + a, lo + b, level + 1))
            a = b
    return order


@numba.njit(cache=True, nogil=True)
def _lcp(codes, offsets, i, j):  # pragma: no cover - compiled
    a, a_end = offsets[i], offsets[i + 1]
    b, b_end = offsets[j], offsets[j + 1]
    n = 0
    while a + n < a_end and b + n < b_end and codes[a + n] == codes[b + n]:
        n += 1
    return n


@numba.njit(cache=True, nogil=True)
def _build_preorder(codes, offsets, order, has_leaf):  # pragma: no cover - compiled
    """Create the nodes in lexicographic pre-order with a stack walk over sorted words.

    Also flags each word equal to the one sorted before it (``same_as_prev``).
    """
    n = order.shape[0]
    lcp = np.zeros(n, np.int64)
    same_as_prev = np.zeros(n, np.bool_)
    total = 1 + has_leaf.sum()
    max_len = 0
    for k in range(n):
        t = order[k]
        length = offsets[t + 1] - offsets[t]
        max_len = max(max_len, length)
        if k > 0:
            lcp[k] = _lcp(codes, offsets, order[k - 1], t)
            prev = order[k - 1]
            same_as_prev[k] = lcp[k] == length and offsets[prev + 1] - offsets[prev] == length
        total += length - lcp[k]
    parent = np.empty(total, np.int64)
    label = np.empty(total, np.int32)
    token = np.full(total, -1, np.int32)
    path = np.empty(max_len + 1, np.int64)  # path[d] = node of the current word at depth d
    parent[0] = -1
    label[0] = -1
    path[0] = 0
    nxt = 1
    for k in range(n):
        t = order[k]
        start = offsets[t]
        length = offsets[t + 1] - start
        for d in range(lcp[k], length):
            parent[nxt] = path[d]
            label[nxt] = codes[start + d]
            path[d + 1] = nxt
            nxt += 1
        if not has_leaf[t]:
            continue
        parent[nxt] = path[length]
        label[nxt] = -1
        token[nxt] = t
        nxt += 1
    return parent, label, token, same_as_prev


@numba.njit(cache=True, nogil=True)
def _renumber(parent, label, token, n_tokens):  # pragma: no cover - compiled
    """Renumber pre-order nodes into genlm-backend's post-order (children by first insertion)."""
    total = parent.shape[0]
    # key = smallest vocabulary position below a node: the order genlm-backend's dicts
    # inserted children in. size = number of nodes in the subtree.
    key = np.full(total, n_tokens, np.int64)
    size = np.ones(total, np.int64)
    for v in range(total - 1, 0, -1):
        if token[v] >= 0:
            key[v] = token[v]
        p = parent[v]
        if key[v] < key[p]:
            key[p] = key[v]
        size[p] += size[v]
    # Children of each pre-order node, grouped (counting sort), then ordered by key.
    count = np.zeros(total + 1, np.int64)
    for v in range(1, total):
        count[parent[v] + 1] += 1
    ptr = np.cumsum(count)
    fill = ptr[:-1].copy()
    kids = np.empty(max(total - 1, 0), np.int64)
    for v in range(1, total):
        p = parent[v]
        kids[fill[p]] = v
        fill[p] += 1
    for u in range(total):
        lo, hi = ptr[u], ptr[u + 1]
        if hi - lo <= 1:
            continue
        if hi - lo <= 32:
            for k in range(lo + 1, hi):
                x = kids[k]
                m = k - 1
                while m >= lo and key[kids[m]] > key[x]:
                    kids[m + 1] = kids[m]
                    m -= 1
                kids[m + 1] = x
        else:
            seg = kids[lo:hi].copy()
            perm = np.argsort(key[seg])
            for k in range(hi - lo):
                kids[lo + k] = seg[perm[k]]
    # Post-order position: a subtree occupies [start, start + size); the node is last.
    start = np.zeros(total, np.int64)
    post = np.empty(total, np.int64)
    for u in range(total):  # pre-order: a parent comes before its children
        cursor = start[u]
        for k in range(ptr[u], ptr[u + 1]):
            c = kids[k]
            start[c] = cursor
            cursor += size[c]
        post[u] = start[u] + size[u] - 1
    new_parent = np.empty(total, np.int32)
    new_label = np.empty(total, np.int32)
    new_token = np.empty(total, np.int32)
    token_leaf = np.full(n_tokens, -1, np.int32)
    child_ptr = np.zeros(total + 1, np.int64)  # child counts, then their prefix sums
    for v in range(total):
        w = post[v]
        new_parent[w] = post[parent[v]] if v > 0 else -1
        new_label[w] = label[v]
        new_token[w] = token[v]
        child_ptr[w + 1] = ptr[v + 1] - ptr[v]
        if token[v] >= 0:
            token_leaf[token[v]] = w
    child_ptr = np.cumsum(child_ptr)
    child_idx = np.empty(max(total - 1, 0), np.int32)
    for u in range(total):
        base = child_ptr[post[u]]
        for k in range(ptr[u], ptr[u + 1]):
            child_idx[base + k - ptr[u]] = post[kids[k]]
    return new_parent, new_label, new_token, child_ptr, child_idx, token_leaf


@numba.njit(cache=True, nogil=True)
def _plan(leaf_token, child_ptr, child_idx, token_leaf):  # pragma: no cover - compiled
    """Number the sources (leaves and branch nodes) compactly, in node order."""
    total = leaf_token.shape[0]
    node_src = np.empty(total, np.int32)
    n_src = 0
    n_branch = 0
    n_kids = 0
    for v in range(total):  # children before parents
        k = child_ptr[v + 1] - child_ptr[v]
        if leaf_token[v] < 0 and k == 1:
            node_src[v] = node_src[child_idx[child_ptr[v]]]
        else:
            node_src[v] = n_src
            n_src += 1
            if leaf_token[v] < 0:
                n_branch += 1
                n_kids += k
    branch = np.empty(n_branch, np.int32)
    branch_ptr = np.zeros(n_branch + 1, np.int64)
    branch_src = np.empty(n_kids, np.int32)
    b = 0
    q = 0
    for v in range(total):
        lo, hi = child_ptr[v], child_ptr[v + 1]
        if leaf_token[v] >= 0 or hi - lo == 1:
            continue
        branch[b] = node_src[v]
        for j in range(lo, hi):
            branch_src[q] = node_src[child_idx[j]]
            q += 1
        b += 1
        branch_ptr[b] = q
    token_src = np.empty(token_leaf.shape[0], np.int32)
    for t in range(token_leaf.shape[0]):
        token_src[t] = node_src[token_leaf[t]] if token_leaf[t] >= 0 else -1
    return token_src, branch, branch_ptr, branch_src, node_src, n_src


def build_trie_arrays(
    codes: np.ndarray, offsets: np.ndarray, has_leaf: np.ndarray | None = None
) -> TrieArrays:
    """The trie of the words ``codes[offsets[i]:offsets[i + 1]]``, genlm-backend's numbering.

    ``has_leaf`` (default: all) says which words end in a leaf; a leafless word only
    creates its path (genlm-bytes' EOS node) and its ``token_leaf`` is -1.
    """
    codes = np.ascontiguousarray(codes, dtype=np.int32)
    offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    n_tokens = offsets.shape[0] - 1
    bits = max(int(codes.max(initial=0)) + 1, 1).bit_length()
    order = _sort_words(codes, offsets, bits, 63 // bits)
    if has_leaf is None:
        has_leaf = np.ones(n_tokens, dtype=np.bool_)
    has_leaf = np.ascontiguousarray(has_leaf, dtype=np.bool_)
    parent, label, token, same = _build_preorder(codes, offsets, order, has_leaf)
    dup = np.flatnonzero(same)
    duplicates = np.stack([order[dup - 1], order[dup]], axis=1).astype(np.int64)
    # _renumber returns the fields of TrieArrays in order, all but ``duplicates``.
    return TrieArrays(*_renumber(parent, label, token, n_tokens), duplicates)


def plan_masses(arrays: TrieArrays) -> MassPlan:
    """The kernel schedule of a trie (see [`MassPlan`][]).

    A leafless word (``token_leaf == -1``) gets source -1: replace ``token_src``
    before running the kernels on such a plan.
    """
    *schedule, n_src = _plan(
        arrays.leaf_token, arrays.child_ptr, arrays.child_idx, arrays.token_leaf
    )
    return MassPlan(*schedule, int(n_src))
