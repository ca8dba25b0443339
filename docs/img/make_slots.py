"""Draw docs/img/slots.svg: one loaded model, N sequence slots, each refilled with the next
item as soon as its reply ends. Plain Python, no dependency: python docs/img/make_slots.py"""

from __future__ import annotations

from pathlib import Path

#: (prompt tokens, reply tokens) of items 1, 2, ... in input order, in steps of the picture
ITEMS = [(3, 5), (3, 2), (2, 8), (3, 3), (2, 3), (2, 6), (3, 4), (3, 3), (2, 4), (2, 3), (3, 4)]
N_SLOTS = 4


def place(items: list[tuple[int, int]], n_slots: int) -> list[list[tuple[str, int, int]]]:
    """Each slot's items: the first n_slots start together, then the next item in input
    order takes the slot that frees first."""
    slots: list[list[tuple[str, int, int]]] = [[] for _ in range(n_slots)]
    ends = [0] * n_slots
    for number, (prompt, reply) in enumerate(items, 1):
        slot = min(range(n_slots), key=lambda k: (ends[k], k))
        slots[slot].append((str(number), prompt, reply))
        ends[slot] += prompt + reply
    return slots


SLOTS = place(ITEMS, N_SLOTS)
STEP, ROW, LEFT, TOP = 18, 34, 170, 70
PREFILL, DECODE = "#f4b860", "#5b8def"


def box(x: float, y: float, w: float, h: float, fill: str, text: str = "") -> str:
    out = f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="3" fill="{fill}" stroke="#333"/>'
    if text:
        out += (
            f'<text x="{x + w / 2}" y="{y + h / 2 + 4}" text-anchor="middle" '
            f'font-size="12" fill="#fff">{text}</text>'
        )
    return out


def draw() -> str:
    width = LEFT + 26 * STEP + 20
    height = TOP + len(SLOTS) * ROW + 70
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        '<text x="10" y="24" font-size="15" font-weight="bold">One loaded model, '
        f"{len(SLOTS)} slots: a slot takes the next item when its reply ends</text>",
        box(10, TOP, 120, len(SLOTS) * ROW - 8, "#555", ""),
        f'<text x="70" y="{TOP + len(SLOTS) * ROW / 2 - 8}" text-anchor="middle" '
        'font-size="13" fill="#fff">your Llama</text>',
        f'<text x="70" y="{TOP + len(SLOTS) * ROW / 2 + 10}" text-anchor="middle" '
        'font-size="11" fill="#fff">(weights shared)</text>',
    ]
    for row, items in enumerate(SLOTS):
        y = TOP + row * ROW
        parts.append(
            f'<text x="{LEFT - 8}" y="{y + 17}" text-anchor="end" font-size="12">slot {row}</text>'
        )
        x = LEFT
        for name, prompt, reply in items:
            parts.append(box(x, y, prompt * STEP, ROW - 10, PREFILL, f"#{name}"))
            x += prompt * STEP
            parts.append(box(x, y, reply * STEP, ROW - 10, DECODE))
            x += reply * STEP
    y = TOP + len(SLOTS) * ROW + 8
    parts += [
        f'<line x1="{LEFT}" y1="{y}" x2="{LEFT + 25 * STEP}" y2="{y}" stroke="#333" '
        'marker-end="url(#arrow)"/>',
        '<defs><marker id="arrow" markerWidth="8" markerHeight="8" refX="6" refY="4" '
        'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>',
        f'<text x="{LEFT}" y="{y + 18}" font-size="12">time: one decode step reads the '
        "weights once for every slot</text>",
        box(LEFT, y + 30, 14, 14, PREFILL),
        f'<text x="{LEFT + 20}" y="{y + 42}" font-size="12">prefill of item #n '
        "(only what the slot does not hold yet)</text>",
        box(LEFT + 330, y + 30, 14, 14, DECODE),
        f'<text x="{LEFT + 350}" y="{y + 42}" font-size="12">decode of its reply</text>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


if __name__ == "__main__":
    out = Path(__file__).with_name("slots.svg")
    out.write_text(draw(), encoding="utf-8")
    print(out)
