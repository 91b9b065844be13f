# check_public_signatures.cmake: fails, naming file and line, when a public function in a
# public header (<module>/*.h, not <module>/detail/) names `detail::` in its return type or
# in a parameter's type. What a user reads in the header, and what an IDE shows for the
# call, is then a public name: an alias (`Mutex::LockOperation`, `ResumeOnOperation`) for a
# type that lives in detail/ (issue #33; docs/contributing.md, "Public names").
#
# What counts as public: a function (member or free) declared in namespace weft (or a
# nested namespace whose name has no "detail") at namespace scope, or in the public:
# section of a class there. Private and protected members, friend declarations,
# using-declarations, variables, function bodies and everything in a detail namespace are
# not checked. Constraints (template heads, requires-clauses: lines that begin with
# `template <` or `requires`, and their continuation lines) are not checked either: they
# say what is accepted, not what is returned or taken.
#
# It is a line-based reading, not a C++ parser: it relies on the layout clang-format gives
# (a template head and a requires-clause on lines of their own; one declaration per line
# group, ended by `;` or `{`). A declaration it cannot read is not reported, so it can miss
# an unusual layout, but every report is a declaration to fix.
#
# Run as a script: cmake -DWEFT_SOURCE_DIR=<repository> -DWEFT_MODULES=coro,executors,...
#                        -P cmake/check_public_signatures.cmake
# (weft_add_header_check runs it as part of the header check, and ctest as
# cmake/check_public_signatures.)

if(NOT WEFT_SOURCE_DIR OR NOT WEFT_MODULES)
  message(FATAL_ERROR "check_public_signatures.cmake: set WEFT_SOURCE_DIR and WEFT_MODULES")
endif()

# Collapses every innermost <...> (template arguments) or (...) group of `text`, repeatedly,
# into one token: DETAILNAME_ when the group named detail:: (already DETAILNAME_ in `text`),
# else ANGLES_ / PARENS_, and sets `out` to the result.
function(_weft_collapse_groups text out)
  set(previous "")
  while(NOT text STREQUAL previous)
    set(previous "${text}")
    string(REGEX REPLACE "<[^<>(){};]*DETAILNAME_[^<>(){};]*>" " DETAILNAME_ " text "${text}")
    string(REGEX REPLACE "<[^<>(){};]*>" " ANGLES_ " text "${text}")
    string(REGEX REPLACE "\\([^()]*DETAILNAME_[^()]*\\)" " DPARENS_ " text "${text}")
    string(REGEX REPLACE "\\([^()]*\\)" " PARENS_ " text "${text}")
  endwhile()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

# Reads one declaration head (up to its first `{` or `;` outside parentheses, and maybe
# more, which is ignored); reports it when it is a
# function whose return type or parameters name detail::. Sets `found` in the caller.
function(_weft_check_head file line head)
  set(found FALSE PARENT_SCOPE)
  if(NOT head MATCHES "detail::")
    return()
  endif()
  string(STRIP "${head}" head)
  set(notFunction "using|friend|typedef|static_assert|namespace|enum|concept|return")
  if(head MATCHES "^(${notFunction})[^A-Za-z0-9_]")
    return()
  endif()
  string(REGEX REPLACE "\\[\\[[^]]*\\]\\]" " " head "${head}")          # attributes
  string(REGEX REPLACE "\"([^\"\\\\]|\\\\.)*\"" " STRING_ " head "${head}")  # literals
  # Operators, before their symbols meet the group collapsing: one identifier each.
  string(REGEX REPLACE "operator[ \t]*\\([ \t]*\\)" " operator_call " head "${head}")
  string(REGEX REPLACE "operator[ \t]*[^A-Za-z0-9_ \t(][^(]*\\(" " operator_symbol ("
         head "${head}")
  string(REGEX REPLACE "operator[ \t]+([A-Za-z_][A-Za-z_0-9]*)[^(]*\\(" " operator_\\1 ("
         head "${head}")
  string(REGEX REPLACE "(weft::)?detail::[A-Za-z_0-9:]*" " DETAILNAME_ " head "${head}")
  _weft_collapse_groups("${head}" head)
  string(REGEX REPLACE "[{;].*$" "" head "${head}")  # the head ends at its first { or ;
  # The declarator: the first name followed by its parameter list that is not a keyword
  # taking parentheses.
  set(rest "${head}")
  set(before "")
  set(name "")
  while(rest MATCHES "^(.*)$")
    if(NOT rest MATCHES "([A-Za-z_][A-Za-z_0-9]*)[ \t]*(D?PARENS_)")
      return()  # no function
    endif()
    set(candidate "${CMAKE_MATCH_1}")
    set(params "${CMAKE_MATCH_2}")
    string(FIND "${rest}" "${CMAKE_MATCH_0}" at)
    string(SUBSTRING "${rest}" 0 ${at} prefix)
    string(LENGTH "${CMAKE_MATCH_0}" length)
    math(EXPR after "${at} + ${length}")
    string(SUBSTRING "${rest}" ${after} -1 rest)
    set(keywords "requires|decltype|noexcept|alignas|sizeof|alignof|explicit|throw")
    if(candidate MATCHES "^(${keywords}|DETAILNAME_)$")
      string(APPEND before "${prefix} ${candidate} ${params}")
      continue()
    endif()
    if(prefix MATCHES "DETAILNAME_[ \t]*(ANGLES_[ \t]*)?::[ \t]*$")
      return()  # the definition of a detail class's member, out of its class
    endif()
    string(APPEND before "${prefix}")
    set(name "${candidate}")
    break()
  endwhile()
  if(name STREQUAL "" OR before MATCHES "=")
    return()  # a variable's initializer, not a declaration
  endif()
  set(where "")
  if(before MATCHES "DETAILNAME_")
    list(APPEND where "return type")
  endif()
  if(params STREQUAL "DPARENS_")
    list(APPEND where "parameters")
  endif()
  if(rest MATCHES "->[^=]*DETAILNAME_")
    list(APPEND where "trailing return type")
  endif()
  if(where)
    string(REPLACE ";" " and " where "${where}")
    string(REGEX REPLACE "^operator_" "operator " name "${name}")
    message(SEND_ERROR "${file}:${line}: ${name}() names detail:: in its ${where}: give the "
                       "type a public name (an alias in the header) and use it there")
    set(found TRUE PARENT_SCOPE)
  endif()
endfunction()

set(modules "${WEFT_MODULES}")
string(REPLACE "," ";" WEFT_MODULES "${WEFT_MODULES}")
set(violations 0)
foreach(module IN LISTS WEFT_MODULES)
  file(GLOB files RELATIVE "${WEFT_SOURCE_DIR}" "${WEFT_SOURCE_DIR}/${module}/*.h")
  list(SORT files)
  foreach(file IN LISTS files)
    file(STRINGS "${WEFT_SOURCE_DIR}/${file}" lines)
    # The scopes around the current line, innermost last: "public" (a namespace that is
    # not detail's, a class's public section), "hidden" (a class's private or protected
    # section, a detail namespace), "sealed" (a class declared in a hidden scope: all of
    # it is hidden) or "body" (a function body, an enum, an initializer).
    set(scopes "public")
    set(head "")
    set(headLine 0)
    set(inConstraint FALSE)
    set(number 0)
    foreach(text IN LISTS lines)
      math(EXPR number "${number} + 1")
      string(REGEX REPLACE "//.*$" "" text "${text}")
      string(REGEX REPLACE "'[^'\\\\]'" "' '" text "${text}")  # '{' and '}'
      if(text MATCHES "^[ \t]*#")
        continue()
      endif()
      list(GET scopes -1 scope)
      if(NOT scope STREQUAL "body")
        if(text MATCHES "^[ \t]*(public|private|protected)[ \t]*:([^:].*)?$")
          if(scope STREQUAL "sealed")
            # A class inside a hidden section: hidden whatever its labels say.
          elseif(CMAKE_MATCH_1 STREQUAL "public")
            set(scope "public")
          else()
            set(scope "hidden")
          endif()
          list(POP_BACK scopes)
          list(APPEND scopes "${scope}")
          string(REGEX REPLACE "^[ \t]*(public|private|protected)[ \t]*:" "" text "${text}")
        endif()
        # Constraints are not signatures (see the file comment).
        if(head MATCHES "^[ \t]*$" AND
           text MATCHES "^[ \t]*(template[ \t]*<.*>|requires[ \t(].*)[ \t]*$")
          set(inConstraint FALSE)
          if(text MATCHES "(&&|\\|\\|)[ \t]*$")
            set(inConstraint TRUE)
          endif()
          continue()
        endif()
        if(inConstraint)
          if(NOT text MATCHES "(&&|\\|\\|)[ \t]*$")
            set(inConstraint FALSE)
          endif()
          continue()
        endif()
        if(head MATCHES "^[ \t]*$")
          set(headLine ${number})
        endif()
        string(APPEND head " ${text}")
      endif()
      string(REGEX MATCHALL "{" opens "${text}")
      string(REGEX MATCHALL "}" closes "${text}")
      list(LENGTH opens opens)
      list(LENGTH closes closes)
      math(EXPR net "${opens} - ${closes}")
      # The head ends at its first { or ; outside parentheses (not at a default argument's
      # `= {}`).
      set(ended FALSE)
      if(NOT scope STREQUAL "body" AND (opens GREATER 0 OR text MATCHES ";"))
        set(declaration "${head}")
        set(previous "")
        while(NOT declaration STREQUAL previous)
          set(previous "${declaration}")
          string(REGEX REPLACE "\\([^()]*\\)" " PARENS_ " declaration "${declaration}")
        endwhile()
        if(NOT declaration MATCHES "\\(" AND declaration MATCHES "[{;]")
          set(ended TRUE)
        endif()
      endif()
      if(ended)
        string(REGEX REPLACE "[{;].*$" "" declaration "${declaration}")
        if(scope STREQUAL "public")
          _weft_check_head("${WEFT_SOURCE_DIR}/${file}" ${headLine} "${head}")
          if(found)
            math(EXPR violations "${violations} + 1")
          endif()
        endif()
        # What the brace opens.
        set(opened "body")
        if(declaration MATCHES "(^|[^A-Za-z_0-9])enum([^A-Za-z_0-9]|$)")
          set(opened "body")
        elseif(declaration MATCHES "(^|[^A-Za-z_0-9])namespace([^A-Za-z_0-9]|$)")
          if(declaration MATCHES "detail" OR declaration MATCHES "namespace[ \t]*$")
            set(opened "sealed")
          else()
            set(opened "public")
          endif()
        elseif(declaration MATCHES "extern[ \t]+\"C\"")
          set(opened "${scope}")
        elseif(declaration MATCHES "(^|[^A-Za-z_0-9])struct([^A-Za-z_0-9]|$)" OR
               declaration MATCHES "(^|[^A-Za-z_0-9])union([^A-Za-z_0-9]|$)")
          set(opened "public")
          if(NOT scope STREQUAL "public")
            set(opened "sealed")
          endif()
        elseif(declaration MATCHES "(^|[^A-Za-z_0-9])class([^A-Za-z_0-9]|$)")
          set(opened "hidden")
          if(NOT scope STREQUAL "public")
            set(opened "sealed")
          endif()
        endif()
        set(head "")
      endif()
      # Scopes opened and closed on this line cancel out; one left open is `opened`.
      if(net GREATER 0)
        if(scope STREQUAL "body")
          set(opened "body")
        endif()
        foreach(i RANGE 1 ${net})
          list(APPEND scopes "${opened}")
          set(opened "body")  # a second brace left open on one line: inside the first
        endforeach()
      elseif(net LESS 0)
        set(head "")  # the } of a namespace or a class: what follows starts anew
        math(EXPR net "0 - ${net}")
        foreach(i RANGE 1 ${net})
          list(LENGTH scopes depth)
          if(depth GREATER 1)
            list(POP_BACK scopes)
          endif()
        endforeach()
      endif()
    endforeach()
  endforeach()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "weft: ${violations} public function(s) name detail:: in their "
                      "signature (see above)")
endif()
message(STATUS "weft: public functions name only public types (${modules})")
