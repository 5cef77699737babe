def task():
    return "MARKER:from-python Say hello."
