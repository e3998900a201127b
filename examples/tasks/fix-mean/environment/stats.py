"""A small statistics module."""


def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    total = 0
    for v in values:
        total += v
    return total / (len(values) - 1)


def median(values):
    """The middle value of a non-empty list (the mean of the two middle ones for an even length)."""
    if not values:
        raise ValueError("median of an empty list")
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
