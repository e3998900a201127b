// Hosts a precompiled header (cmake/CorralPch.cmake): the header is the product, this unit is empty.
