"""The remote agent: runs a bundle's variants and writes the results CSV.

Python >= 3.8 standard library only (numpy is used when present). Never imports harness.
"""
